"""Throughput of trainyard-tokenize --tokenizer against PyPI's tokenizers, 1 thread each.

Trains a Llama-3 style byte-level BPE (Split regex + ByteLevel, ignore_merges) with
`tokenizers` on the inputs (or takes --tokenizer FILE), then encodes the same files
with both and prints MB/s. Nothing is asserted; the ids are compared and a difference
is reported.

  tokenizers: RAYON_NUM_THREADS=1 (set here before the import: its thread pool reads it
    once) and TOKENIZERS_PARALLELISM=false; Tokenizer.encode per document, texts
    already in memory, the clock around the encoding alone.
  trainyard-tokenize: --threads 1, default 1 MiB segments; the MB/s it prints covers
    reading the files and writing the dataset too, and the wall clock of the whole
    process (loading tokenizer.json included) is printed beside it.

  /opt/trainyard/venv/bin/python bench/tokenize_hf_bench.py --tool build/bin/trainyard-tokenize \\
      --vocab 32000 /usr/lib/python3.11
"""

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import re  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def files_under(root, suffix):
    out = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        out += [os.path.join(d, n) for n in sorted(names) if n.endswith(suffix)]
    return out


def read_ids(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    fmt, width = ("H", 2) if idx[17] == 8 else ("i", 4)
    (n,) = struct.unpack_from("<Q", idx, 18)
    lengths = struct.unpack_from("<%di" % n, idx, 34)
    pointers = struct.unpack_from("<%dq" % n, idx, 34 + 4 * n)
    return [list(struct.unpack_from("<%d%s" % (k, fmt), data, p)) for k, p in zip(lengths, pointers)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--tokenizer", help="a tokenizer.json to use instead of training one")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--suffix", default=".py")
    ap.add_argument("root")
    args = ap.parse_args()

    files = files_under(args.root, args.suffix)
    texts = []
    kept = []
    seen = set()
    for path in files:
        st = os.stat(path)
        # The tool takes each file once (links to one seen are skipped) and empty ones
        # hold no document.
        if st.st_size == 0 or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        with open(path, "rb") as f:
            data = f.read()
        try:
            texts.append(data.decode("utf-8"))
            kept.append(path)
        except UnicodeDecodeError:
            pass  # the tool would refuse it; left out of both
    total = sum(len(t.encode()) for t in texts)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.tokenizer
        if path is None:
            tok = Tokenizer(models.BPE(ignore_merges=True))
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            tok.decoder = decoders.ByteLevel()
            tok.train(kept, trainers.BpeTrainer(vocab_size=args.vocab, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
            path = os.path.join(tmp, "tokenizer.json")
            tok.save(path)
        tok = Tokenizer.from_file(path)

        start = time.perf_counter()
        want = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        lib_s = time.perf_counter() - start

        prefix = os.path.join(tmp, "out")
        start = time.perf_counter()
        r = subprocess.run([args.tool, "-o", prefix, "--tokenizer", path, "--eos", "none", "--threads", "1", *kept],
                           capture_output=True, text=True, check=True)
        tool_wall = time.perf_counter() - start
        tool_rate = float(re.search(r"([0-9.]+) MB/s", r.stdout).group(1))
        same = read_ids(prefix) == want

    print("input: %d files, %.1f MB under %s; vocabulary %d; %d tokens" % (
        len(kept), total / 1e6, args.root, tok.get_vocab_size(), sum(map(len, want))))
    print("tokenizers %s, 1 thread:       %6.2f MB/s (%.2f s encoding)" % (
        __import__("tokenizers").__version__, total / lib_s / 1e6, lib_s))
    print("trainyard-tokenize, 1 thread:  %6.2f MB/s (its summary: read, encode, write); %.2f MB/s wall "
          "(%.2f s, the whole process)" % (tool_rate, total / tool_wall / 1e6, tool_wall))
    print("ids equal: %s" % same)


if __name__ == "__main__":
    main()
