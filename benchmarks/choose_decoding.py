"""Choose how finished runs decode, on val only: the checkpoints averaged, the beam and alpha.

Scores each run folder on the whole validation set under every combination of the settings
given, and appends one record per run and setting to a JSON-lines file, in the format of
`search`'s trials. The test set is not read: `record` scores it once, with the setting chosen
here.

    python benchmarks/choose_decoding.py RUN_EN_DE RUN_DE_EN --average 1 3 5 \
        --alpha 0.6 1.0 --out results/cpu-decodings.jsonl
"""

import argparse
import itertools
import sys
from dataclasses import asdict
from pathlib import Path

from transformer.config import TrainConfig
from transformer.decoding import Decoding
from transformer.devices import describe_device, resolve_device
from transformer.evaluation import load_run
from transformer.reports import summary_line
from transformer.results import provenance
from transformer.search import add_trials, score_trial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders that train wrote")
    parser.add_argument("--average", type=int, nargs="+", default=[Decoding.average])
    parser.add_argument("--beam-size", type=int, nargs="+", default=[Decoding.beam_size])
    parser.add_argument("--alpha", type=float, nargs="+", default=[Decoding.alpha])
    parser.add_argument("--out", required=True, help="the JSON-lines file to append to")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-sentences", type=int, help="only the first N of val (a check)")
    args = parser.parse_args()
    settings = itertools.product(args.average, args.beam_size, args.alpha)
    decodings = [Decoding(*setting) for setting in settings]  # each one checked
    device = resolve_device(args.device)
    for run in args.runs:
        _, ckpt = load_run(run, 1, device)  # the last checkpoint: its TrainConfig
        cfg = TrainConfig(**ckpt["train_config"])
        records = []
        for decoding in decodings:
            record = {
                "trial": Path(run).name,
                "direction": f"{cfg.src}-{cfg.tgt}",
                "device": describe_device(device),
                "train": asdict(cfg),
                "decoding": asdict(decoding),
            }
            record |= score_trial(cfg, decoding, device, args.max_sentences)
            records.append(record | {"changes": {}, **provenance(["python", *sys.argv])})
            print(summary_line(records[-1]), flush=True)
        add_trials(args.out, records)


if __name__ == "__main__":
    main()
