#!/usr/bin/env python3
"""An independent writer of Megatron-LM indexed datasets (.idx + .bin) for the tests.

Written from the format (megatron/core/datasets/indexed_dataset.py, _IndexWriter) with
`struct` only, sharing no code with common/data, so a test that reads what this writes
checks the C++ reader against a second implementation. It can also break the files on
purpose, and write the seed corpus of the indexed_index_fuzz target.

  write_indexed.py SPEC.json       writes SPEC["prefix"] + ".idx" / ".bin"
  write_indexed.py --fuzz-seeds DIR

SPEC keys: prefix; dtype (Megatron code 1..8); docs: a list of documents, each a list of
sequences, each a list of token values; or sparse_tokens: N (one document of one
sequence of N zero tokens, the .bin made sparse with truncate). Breakage, all optional:
magic (text), version, dtype_code (written instead of dtype), sequence_count,
document_count, lengths {index: value}, pointers {index: value}, doc_indices (a list
written instead), modes (true: append one int8 mode per sequence), trailing (bytes of
junk), idx_cut / bin_cut (bytes dropped from the end), bin_extra (zero bytes appended).
"""
import json
import struct
import sys

FORMATS = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}
MAGIC = b"MMIDIDX\x00\x00"


def build(spec):
    """Returns (idx bytes, bin bytes or None, bin size)."""
    code = spec["dtype"]
    fmt = "<" + FORMATS[code]
    itemsize = struct.calcsize(fmt)
    lengths, doc_indices, data = [], [0], bytearray()
    if "sparse_tokens" in spec:
        lengths = [spec["sparse_tokens"]]
        doc_indices = [0, 1]
        bin_bytes = None
        bin_size = spec["sparse_tokens"] * itemsize
    else:
        for doc in spec["docs"]:
            for seq in doc:
                lengths.append(len(seq))
                for v in seq:
                    data += struct.pack(fmt, v)
            doc_indices.append(len(lengths))
        bin_bytes = bytes(data) + bytes(spec.get("bin_extra", 0))
        if spec.get("bin_cut"):
            bin_bytes = bin_bytes[: len(bin_bytes) - spec["bin_cut"]]
        bin_size = len(bin_bytes)
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += n * itemsize
    for i, v in spec.get("lengths", {}).items():
        lengths[int(i)] = v
    for i, v in spec.get("pointers", {}).items():
        pointers[int(i)] = v
    doc_indices = spec.get("doc_indices", doc_indices)
    idx = bytearray()
    idx += spec["magic"].encode("latin-1") if "magic" in spec else MAGIC
    idx += struct.pack("<Q", spec.get("version", 1))
    idx += struct.pack("<B", spec.get("dtype_code", code))
    idx += struct.pack("<Q", spec.get("sequence_count", len(lengths)))
    idx += struct.pack("<Q", spec.get("document_count", len(doc_indices)))
    idx += struct.pack("<%di" % len(lengths), *lengths)
    idx += struct.pack("<%dq" % len(pointers), *pointers)
    idx += struct.pack("<%dq" % len(doc_indices), *doc_indices)
    if spec.get("modes"):
        idx += bytes(len(lengths))
    idx += b"\xab" * spec.get("trailing", 0)
    if spec.get("idx_cut"):
        idx = idx[: len(idx) - spec["idx_cut"]]
    return bytes(idx), bin_bytes, bin_size


def write(spec):
    idx, bin_bytes, bin_size = build(spec)
    with open(spec["prefix"] + ".idx", "wb") as f:
        f.write(idx)
    with open(spec["prefix"] + ".bin", "wb") as f:
        if bin_bytes is None:
            f.truncate(bin_size)
        else:
            f.write(bin_bytes)


def fuzz_seeds(folder):
    """The fuzz target's input: uint64 little-endian .bin size, then the .idx bytes."""
    docs = [[[1, 2, 3], [4]], [[5, 6]], [[]]]
    seeds = {
        "valid-uint16": {"dtype": 8, "docs": docs},
        "valid-int32-one-doc": {"dtype": 4, "docs": [[[7, 8, 9, 10]]]},
        "valid-float32": {"dtype": 7, "docs": docs},
        "valid-empty": {"dtype": 1, "docs": []},
        "bad-magic": {"dtype": 8, "docs": docs, "magic": "MMIDIDY\x00\x00"},
        "bad-version": {"dtype": 8, "docs": docs, "version": 2},
        "bad-dtype": {"dtype": 8, "docs": docs, "dtype_code": 9},
        "overrun-counts": {"dtype": 8, "docs": docs, "sequence_count": 1 << 40},
        "pointer-gap": {"dtype": 8, "docs": docs, "pointers": {"2": 100}},
        "negative-length": {"dtype": 5, "docs": docs, "lengths": {"1": -1}},
        "multimodal": {"dtype": 8, "docs": docs, "modes": True},
        "doc-indices-down": {"dtype": 8, "docs": docs, "doc_indices": [0, 3, 2, 4]},
        "bin-too-short": {"dtype": 8, "docs": docs, "bin_cut": 2},
    }
    for name, spec in seeds.items():
        idx, bin_bytes, bin_size = build(spec)
        with open(f"{folder}/{name}", "wb") as f:
            f.write(struct.pack("<Q", bin_size) + idx)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fuzz-seeds":
        fuzz_seeds(sys.argv[2])
    elif len(sys.argv) == 2:
        with open(sys.argv[1]) as f:
            write(json.load(f))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
