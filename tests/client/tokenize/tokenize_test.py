"""trainyard-tokenize end to end: runs the built binary and reads its dataset back.

The reader below is independent of the tool: it follows Megatron-LM's
indexed_dataset.py layout (_IndexWriter / _IndexReader) with Python's struct, and
checks every field against what it computes from the inputs itself. SentencePiece ids
are decoded by tokenize_spm_decode (SentencePiece's own processor).

Environment: TRAINYARD_TOKENIZE (the binary), TOKENIZE_SPM_DECODE (the decoder).
"""

import glob
import os
import signal
import struct
import subprocess
import tempfile
import time
import unittest

TOOL = os.environ["TRAINYARD_TOKENIZE"]
DECODE = os.environ["TOKENIZE_SPM_DECODE"]
LICENSES = [os.path.join("/usr/share/common-licenses", n)
            for n in ("GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "Artistic")]


def read_dataset(prefix):
    """(dtype code, [document token lists]) after checking every field of the pair."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", idx[:9]
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1, version
    code = idx[17]
    assert code in (4, 8), code
    width, fmt = (2, "H") if code == 8 else (4, "i")
    sequences, documents = struct.unpack_from("<QQ", idx, 18)
    offset = 34
    lengths = struct.unpack_from("<%di" % sequences, idx, offset)
    offset += 4 * sequences
    pointers = struct.unpack_from("<%dq" % sequences, idx, offset)
    offset += 8 * sequences
    doc_index = struct.unpack_from("<%dq" % documents, idx, offset)
    offset += 8 * documents
    assert offset == len(idx), "trailing bytes in the .idx: %d of %d" % (offset, len(idx))
    # One sequence per document: the index is 0, 1, ..., sequences.
    assert list(doc_index) == list(range(sequences + 1)), doc_index[:10]
    expected_pointer = 0
    for length, pointer in zip(lengths, pointers):
        assert length > 0, length
        assert pointer == expected_pointer, (pointer, expected_pointer)
        expected_pointer += length * width
    assert expected_pointer == len(data), (expected_pointer, len(data))
    docs = [list(struct.unpack_from("<%d%s" % (n, fmt), data, p)) for n, p in zip(lengths, pointers)]
    return code, docs


def decode(model, docs):
    """The decoded bytes of each document (ids without the EOS)."""
    text = "".join(" ".join(str(t) for t in d) + "\n" for d in docs)
    out = subprocess.run([DECODE, model], input=text.encode(), capture_output=True, check=True).stdout
    result, pos = [], 0
    while pos < len(out):
        newline = out.index(b"\n", pos)
        n = int(out[pos:newline])
        result.append(out[newline + 1:newline + 1 + n])
        pos = newline + 1 + n
    return result


def run(*args):
    return subprocess.run([TOOL, *args], capture_output=True, text=True)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def ok(self, *args):
        r = run(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("trainyard-tokenize: ", r.stdout)
        return r.stdout

    def fails(self, rc, message, *args, prefix=None):
        r = run(*args)
        self.assertEqual(r.returncode, rc, r.stdout + r.stderr)
        self.assertIn(message, r.stderr)
        if prefix is not None:  # nothing under the output names, no temporary either
            base = os.path.basename(prefix)
            left = [n for n in os.listdir(os.path.dirname(prefix))
                    if n.startswith(base + ".") or n.startswith("." + base + ".")]
            self.assertEqual(left, [], r.stderr)
        return r.stderr


class ByteLevelTest(Base):
    def make_tree(self):
        files = {
            "corpus/b.txt": "second file\n".encode(),
            "corpus/a.txt": "caf\u00e9 \u20ac first\nline two\n".encode(),
            "corpus/sub/z.txt": b"raw bytes \x00\xff\xfe kept\n",
            "corpus/sub/B.txt": b"capital B sorts before lowercase\n",
            "corpus/notes.md": b"not a .txt\n",
            "corpus/empty.txt": b"",
        }
        for name, data in files.items():
            write(os.path.join(self.dir, name), data)
        return files

    def test_documents_are_the_files_bytes_in_bytewise_order(self):
        files = self.make_tree()
        prefix = os.path.join(self.dir, "out")
        summary = self.ok("-o", prefix, "--glob", "*.txt", os.path.join(self.dir, "corpus"))
        code, docs = read_dataset(prefix)
        self.assertEqual(code, 8)
        expected = sorted(n for n in files if n.endswith(".txt") and files[n])
        expected.sort(key=lambda n: os.path.join(self.dir, n).encode())
        self.assertEqual([bytes(d) for d in docs], [files[n] for n in expected])
        self.assertIn("needs model.vocab_size >= 256", summary)
        self.assertIn("eos none", summary)
        self.assertIn("5 files (1 empty), 4 documents", summary)

    def test_eos_id_extends_the_vocabulary(self):
        self.make_tree()
        prefix = os.path.join(self.dir, "eos")
        a = os.path.join(self.dir, "corpus/a.txt")
        b = os.path.join(self.dir, "corpus/b.txt")
        summary = self.ok("-o", prefix, "--eos", "256", b, a)  # the order given
        _, docs = read_dataset(prefix)
        with open(a, "rb") as f:
            a_bytes = f.read()
        self.assertEqual(docs[0], list(b"second file\n") + [256])
        self.assertEqual(docs[1], list(a_bytes) + [256])
        self.assertIn("needs model.vocab_size >= 257", summary)

    def test_int32_dtype(self):
        self.make_tree()
        prefix = os.path.join(self.dir, "wide")
        self.ok("-o", prefix, "--dtype", "int32", os.path.join(self.dir, "corpus/b.txt"))
        code, docs = read_dataset(prefix)
        self.assertEqual(code, 4)
        self.assertEqual(docs, [list(b"second file\n")])

    def test_split_blank_lines(self):
        text = b"\nfirst para\nstill first\n\n\nsecond\r\n\r\nthird  \n \nstill third"
        path = os.path.join(self.dir, "p.txt")
        write(path, text)
        prefix = os.path.join(self.dir, "paras")
        self.ok("-o", prefix, "--split-blank-lines", path)
        _, docs = read_dataset(prefix)
        self.assertEqual([bytes(d) for d in docs],
                         [b"first para\nstill first\n", b"second\r\n", b"third  \n \nstill third"])


class SentencePieceTest(Base):
    def test_trained_model_encodes_and_decodes_every_file(self):
        prefix = os.path.join(self.dir, "lic")
        summary = self.ok("-o", prefix, "--train-vocab", "512", *LICENSES)
        model = prefix + ".model"
        self.assertTrue(os.path.getsize(model) > 0)
        code, docs = read_dataset(prefix)
        self.assertEqual(code, 8)
        self.assertEqual(len(docs), len(LICENSES))
        self.assertIn("eos 2", summary)
        for d in docs:
            self.assertEqual(d[-1], 2)  # </s> after every document
            self.assertLess(max(d), 512)
        texts = decode(model, [d[:-1] for d in docs])
        for path, text in zip(LICENSES, texts):
            with open(path, "rb") as f:
                self.assertEqual(text, f.read(), path)
        # Far fewer tokens than bytes: the model learned pieces, not just byte fallback.
        total_bytes = sum(os.path.getsize(p) for p in LICENSES)
        self.assertLess(sum(len(d) for d in docs), total_bytes * 0.7)

    def test_segments_and_threads_change_nothing_but_memory(self):
        prefix = os.path.join(self.dir, "m")
        self.ok("-o", prefix, "--train-vocab", "400", "--model-type", "bpe", *LICENSES[:2])
        model = prefix + ".model"
        variants = {}
        for name, extra in {"whole": ["--threads", "1"],
                            "small": ["--segment-kib", "1", "--threads", "2"],
                            "small1": ["--segment-kib", "1", "--threads", "1"]}.items():
            p = os.path.join(self.dir, name)
            self.ok("-o", p, "--model", model, "--eos", "none", *LICENSES)
            variants[name] = read_dataset(p)[1]
        # Threads never change the tokens; small segments still decode to the files.
        self.assertEqual(variants["small"], variants["small1"])
        for docs in variants.values():
            for path, text in zip(LICENSES, decode(model, docs)):
                with open(path, "rb") as f:
                    self.assertEqual(text, f.read(), path)

    def test_invalid_utf8_is_refused_or_replaced(self):
        path = os.path.join(self.dir, "bad.txt")
        write(path, b"good line\nbad \xff byte\n")
        prefix = os.path.join(self.dir, "u")
        self.ok("-o", prefix, "--train-vocab", "400", LICENSES[0])
        model = prefix + ".model"
        out = os.path.join(self.dir, "encoded")
        self.fails(1, "input '%s': invalid UTF-8 at byte 14" % path, "-o", out, "--model", model, path,
                   prefix=out)
        self.assertFalse(os.path.exists(out + ".bin"))
        self.ok("-o", out, "--model", model, "--invalid-utf8", "replace", path)
        _, docs = read_dataset(out)
        self.assertEqual(decode(model, [docs[0][:-1]])[0], "good line\nbad \ufffd byte\n".encode())


class HelpTest(unittest.TestCase):
    def test_help_ends_with_an_example(self):
        r = subprocess.run([TOOL, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Examples:\n  trainyard-tokenize -o /data/corpus /data/text", r.stdout)
        self.assertIn("--set training.dataset_path=/data/corpus.idx --set model.vocab_size=N", r.stdout)


class HostileTest(Base):
    def test_missing_input(self):
        prefix = os.path.join(self.dir, "o")
        missing = os.path.join(self.dir, "nope.txt")
        self.fails(1, "input '%s': no such file or folder" % missing, "-o", prefix, missing, prefix=prefix)

    def test_empty_input(self):
        prefix = os.path.join(self.dir, "o")
        empty = os.path.join(self.dir, "empty.txt")
        write(empty, b"")
        self.fails(1, "every input file is empty (1 files)", "-o", prefix, empty, prefix=prefix)
        folder = os.path.join(self.dir, "void")
        os.makedirs(folder)
        self.fails(1, "input '%s': the folder holds no file" % folder, "-o", prefix, folder, prefix=prefix)
        write(os.path.join(folder, "x.md"), b"x")
        self.fails(1, "no file matches --glob '*.py'", "-o", prefix, "--glob", "*.py", folder, prefix=prefix)

    def test_unreadable_input(self):
        if os.geteuid() == 0:
            self.skipTest("root reads every file")
        path = os.path.join(self.dir, "secret.txt")
        write(path, b"x")
        os.chmod(path, 0)
        self.fails(1, "cannot open: Permission denied", "-o", os.path.join(self.dir, "o"), path)

    def test_output_folder_missing(self):
        src = os.path.join(self.dir, "in.txt")
        write(src, b"text\n")
        out = os.path.join(self.dir, "no/such/folder/out")
        self.fails(2, "the folder '%s' does not exist" % os.path.dirname(out), "-o", out, src)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "no")))
        self.fails(2, "expected a prefix", "-o", os.path.join(self.dir, "x.idx"), src)

    def test_bad_model_file(self):
        src = os.path.join(self.dir, "in.txt")
        write(src, b"text\n")
        bad = os.path.join(self.dir, "bad.model")
        write(bad, b"this is not a protobuf \xff\xff\xff\xff")
        prefix = os.path.join(self.dir, "o")
        self.fails(1, "--model '%s': not a usable SentencePiece model" % bad, "-o", prefix, "--model", bad, src,
                   prefix=prefix)
        self.fails(1, "--model '%s': no such file" % (bad + "x"), "-o", prefix, "--model", bad + "x", src)

    def test_conflicting_flags(self):
        src = os.path.join(self.dir, "in.txt")
        write(src, b"text\n")
        prefix = os.path.join(self.dir, "o")
        self.fails(2, "exclude each other", "-o", prefix, "--model", "m", "--train-vocab", "500", src)
        self.fails(2, "--eos 'x'", "-o", prefix, "--eos", "x", src)
        self.fails(2, "--invalid-utf8 applies to SentencePiece and --tokenizer only", "-o", prefix, "--invalid-utf8", "replace", src)
        self.fails(2, "--dtype 'uint8'", "-o", prefix, "--dtype", "uint8", src)

    def test_kill_mid_run_leaves_no_dataset_and_keeps_the_older_one(self):
        prefix = os.path.join(self.dir, "big")
        # An older dataset under the same prefix, which the killed run must not damage.
        small = os.path.join(self.dir, "small.txt")
        write(small, b"the older dataset\n")
        self.ok("-o", prefix, small)
        with open(prefix + ".bin", "rb") as f:
            old_bin = f.read()
        with open(prefix + ".idx", "rb") as f:
            old_idx = f.read()
        # Enough SentencePiece work on one thread to be caught in the middle.
        self.ok("-o", os.path.join(self.dir, "m"), "--train-vocab", "400", LICENSES[0])
        with open(LICENSES[0], "rb") as f:
            text = f.read()
        big = os.path.join(self.dir, "big.txt")
        write(big, text * (100 * 1000 * 1000 // len(text)))
        proc = subprocess.Popen([TOOL, "-o", prefix, "--model", os.path.join(self.dir, "m.model"), "--threads", "1",
                                 big], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Kill once the temporary .bin holds a few MB: well inside the run.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            temps = glob.glob(os.path.join(self.dir, ".big.bin.tmp-*"))
            if temps and os.path.getsize(temps[0]) >= 4 << 20:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            self.fail("the run ended before it could be killed: %r" % (proc.communicate(),))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        with open(prefix + ".bin", "rb") as f:
            self.assertEqual(f.read(), old_bin)
        with open(prefix + ".idx", "rb") as f:
            self.assertEqual(f.read(), old_idx)
        # Killed fresh: no dataset at all under a new prefix.
        fresh = os.path.join(self.dir, "fresh")
        proc = subprocess.Popen([TOOL, "-o", fresh, "--model", os.path.join(self.dir, "m.model"), "--threads", "1",
                                 big], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while time.monotonic() < deadline and proc.poll() is None:
            temps = glob.glob(os.path.join(self.dir, ".fresh.bin.tmp-*"))
            if temps and os.path.getsize(temps[0]) >= 1 << 20:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            self.fail("the run ended before it could be killed: %r" % (proc.communicate(),))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        self.assertFalse(os.path.exists(fresh + ".bin"))
        self.assertFalse(os.path.exists(fresh + ".idx"))


if __name__ == "__main__":
    unittest.main()
