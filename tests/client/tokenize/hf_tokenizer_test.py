"""trainyard-tokenize --tokenizer against PyPI's `tokenizers`, the library itself.

Each test class trains a byte-level BPE tokenizer with `tokenizers` (Llama-3 style:
Split regex + ByteLevel; Qwen2 style: NFC normalizer, its Split regex + ByteLevel; DeepSeek style: three Splits + ByteLevel and an empty
normalizer Sequence; GPT-2 style: ByteLevel with its own regex), with special and
added tokens and a TemplateProcessing BOS/EOS, saves tokenizer.json, runs the tool on
over 5 MB of text (this repository's sources and docs, Python's standard library and
generated multilingual and odd Unicode text) and checks that every document's ids in
the .bin/.idx (read by tokenize_test.read_dataset) equal `tokenizer.encode(text).ids`.
The tool runs with 1 KiB segments and 2 threads, so every document crosses many
segment boundaries. Then invalid UTF-8 (refused with the byte; replaced per byte),
the --eos choices, and hostile or unsupported tokenizer.json files.

Environment: TRAINYARD_TOKENIZE, TOKENIZE_SPM_DECODE (for tokenize_test's import).
"""

import json
import os
import random
import sysconfig
import tempfile
import unittest

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

from tokenize_test import read_dataset, run

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek-V3's shape: digits, then CJK runs, then the rest, each Split cutting the pieces
# of the one before.
DEEPSEEK_PATTERNS = [
    r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
SPECIALS = ["<|endoftext|>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]

# Samples of scripts and odd Unicode the generated documents are made of.
SAMPLES = [
    "日本語のテキストです。東京都は日本の首都。", "中文文本，包括标点符号！《书名》「引号」",
    "한국어 텍스트입니다. 서울은 수도입니다.", "العربية نص مكتوب من اليمين إلى اليسار، ١٢٣٤٥",
    "हिन्दी पाठ: नमस्ते दुनिया। ०१२३४", "Русский текст: съешь же ещё этих мягких булок.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", "ไทย: สวัสดีชาวโลก", "עברית: שלום עולם",
    "👩‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, 🧑🏿‍💻 coder, 🇫🇷🇯🇵 flags",
    "e\u0301 a\u0308 o\u0303\u0323 Z\u0351\u0324\u035b\u0330a\u0344l\u0353go", "\u200fRTL mark\u202eoverride\u202c\u200d\u200c",
    "NUL\x00inside\x01\x02\x1b[31m\x7f\u0085\u2028\u2029\u00a0nbsp\u3000ideo\u2003em",
    "It's we're they've I'M you'LL he'D don'T", "3.14159 2718281828459045 1,000,000 0x1F ½ ² ①",
    "tabs\t\t\tand\r\nCRLF\r\n\r\n", "<|endoftext|> inside text, <s>start</s>, <|im_start|>user<|im_end|>",
    "partial <|endof and <|im_ and </ and <", "hello world, Hello World, helloworld",
    "\U0001d518\U0001d52b\U0001d526 math \U00010348 gothic \U0001f600",
    "NFC: e\u0301 a\u0323\u0302 \u1100\u1161\u11a8 \u212b \u0344 \u1e9b\u0323 \u0958 \u00e9\u0323 "
    "\u0041\u030a\u0327 \uac00\u11a8 q\u0307\u0323 \u0301\u0301start",
    "odd spaces:\u180e\u180e|\x1c\x1d\x1e\x1f|\u200b\ufeff\u2060|\u205f\u2009x\u00ad",
]


def corpus_files(out_dir):
    """Writes the documents; returns their paths (over 5 MB in all)."""
    paths = []

    def add(name, data):
        path = os.path.join(out_dir, "%05d-%s" % (len(paths), name))
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)

    total = 0
    # This repository's own sources and docs (about 2 MB).
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build"))
        for name in sorted(files):
            if total > 2_000_000 or not name.endswith((".cc", ".h", ".md", ".py", ".toml", ".sh", ".txt")):
                continue
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            add(name, data)
            total += len(data)
    # Python's standard library (about 2.5 MB).
    stdlib = sysconfig.get_paths()["stdlib"]
    for name in sorted(os.listdir(stdlib)):
        if total > 4_500_000 or not name.endswith(".py"):
            continue
        with open(os.path.join(stdlib, name), "rb") as f:
            data = f.read()
        try:
            data.decode("utf-8")  # invalid UTF-8 has tests of its own
        except UnicodeDecodeError:
            continue
        add(name, data)
        total += len(data)
    # Generated text of every sample, mixed with whitespace runs and numbers.
    rng = random.Random(7)
    pieces = ["\n", " ", "  ", "\n\n", "\t", " \n ", "\r\n", "    \n", "   "]
    while total < 5_600_000:
        parts = []
        for _ in range(rng.randrange(50, 400)):
            parts.append(rng.choice(SAMPLES))
            parts.append(rng.choice(pieces))
            if rng.random() < 0.05:
                parts.append(" " * rng.randrange(1, 3000))  # long runs cross 1 KiB segments
            if rng.random() < 0.05:
                parts.append(str(rng.randrange(10 ** 30)))
        data = "".join(parts).encode("utf-8")
        add("generated.txt", data)
        total += len(data)
    add("one-long-line.txt", ("x" * 5000 + "é" * 3000 + "漢" * 2000 + " " * 4000 + "!" * 3000).encode())
    add("trailing-space.txt", b"ends with spaces   ")
    add("just-a-special.txt", b"<|endoftext|>")
    return paths


def train(files, style):
    tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    elif style == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    elif style == "deepseek":
        tok.normalizer = normalizers.Sequence([])
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DEEPSEEK_PATTERNS]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    # An added token that is not special (normalized: matched in the library's second
    # pass), and a special one outside the trained vocabulary.
    tok.add_tokens([AddedToken("hello world", normalized=True), AddedToken("endof", normalized=False)])
    tok.add_special_tokens([AddedToken("<|extra|>", special=True)])
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    if style != "gpt2":
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)]),
        ])
    else:
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos)])
    return tok


def per_byte_replace(error):
    """Each invalid byte becomes one U+FFFD: the tool's --invalid-utf8 replace."""
    return "\ufffd", error.start + 1


import codecs  # noqa: E402

codecs.register_error("trainyard_per_byte", per_byte_replace)


class _Agreement:
    style = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        # The corpus is shared by the classes through a module-level cache.
        cls.files = _corpus()
        cls.tok = train(cls.files[:200], cls.style)
        cls.json = os.path.join(cls.dir, "tokenizer.json")
        cls.tok.save(cls.json)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def expected(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts)]

    def check(self, prefix, texts, *flags):
        r = run("-o", prefix, "--tokenizer", self.json, *flags)
        self.assertEqual(r.returncode, 0, r.stderr)
        _, docs = read_dataset(prefix)
        want = self.expected(texts)
        self.assertEqual(len(docs), len(want))
        for i, (got, exp) in enumerate(zip(docs, want)):
            if got != exp:
                n = next((k for k in range(min(len(got), len(exp))) if got[k] != exp[k]), min(len(got), len(exp)))
                self.fail("document %d: first difference at token %d: tool %s, tokenizers %s (tokens %r)" % (
                    i, n, got[max(0, n - 3):n + 3], exp[max(0, n - 3):n + 3],
                    [self.tok.id_to_token(t) for t in exp[max(0, n - 3):n + 3]]))
        return r.stdout

    def test_ids_equal_the_librarys_on_5mb_of_text(self):
        texts = []
        for path in self.files:
            with open(path, "rb") as f:
                texts.append(f.read().decode("utf-8"))
        self.assertGreater(sum(len(t.encode()) for t in texts), 5_000_000)
        summary = self.check(os.path.join(self.dir, "all"), texts, "--segment-kib", "1", "--threads", "2",
                             *self.files)
        self.assertIn("tokenizer.json", summary)

    def test_added_tokens_and_pieces_across_every_segment_boundary(self):
        # Lines longer than the 1 KiB segment are cut at character starts, so with the
        # prefix growing by one byte each file, every cut falls at every offset of the
        # tokens, the added tokens (both passes) and the whitespace runs.
        unit = ("<|endoftext|>hello world<|im_start|>  \t endof</s>  x123456 é漢😀 "
                "e\u0301\u0323\u0302 \u1100\u1161\u11a8\u0958 ") * 40
        paths, texts = [], []
        for k in range(40):
            text = "y" * k + unit
            path = os.path.join(self.dir, "cut%02d.txt" % k)
            with open(path, "w") as f:
                f.write(text)
            paths.append(path)
            texts.append(text)
        self.check(os.path.join(self.dir, "cuts"), texts, "--segment-kib", "1", "--threads", "2", *paths)

    def test_invalid_utf8_is_refused_with_its_byte(self):
        bad = os.path.join(self.dir, "bad.txt")
        with open(bad, "wb") as f:
            f.write(b"valid text \xc3\xa9 then \xff here")
        r = run("-o", os.path.join(self.dir, "bad"), "--tokenizer", self.json, bad)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("input '%s': invalid UTF-8 at byte 19" % bad, r.stderr)

    def test_invalid_utf8_replaced_per_byte(self):
        cases = [b"a\xffb", b"\xe2\x82 truncated", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong",
                 b"\xf4\x90\x80\x80 past U+10FFFF", b"end \xf0\x9f\x98"]
        paths, texts = [], []
        for i, data in enumerate(cases):
            path = os.path.join(self.dir, "r%d.txt" % i)
            with open(path, "wb") as f:
                f.write(data)
            paths.append(path)
            texts.append(data.decode("utf-8", "trainyard_per_byte"))
        summary = self.check(os.path.join(self.dir, "rep"), texts, "--invalid-utf8", "replace", *paths)
        self.assertIn("invalid UTF-8 bytes replaced by U+FFFD", summary)


_CORPUS = {}


def _corpus():
    if "files" not in _CORPUS:
        _CORPUS["tmp"] = tempfile.TemporaryDirectory()
        _CORPUS["files"] = corpus_files(_CORPUS["tmp"].name)
    return _CORPUS["files"]


class Llama3StyleTest(_Agreement, unittest.TestCase):
    style = "llama3"

    def test_eos_choices(self):
        path = self.files[0]
        with open(path, "rb") as f:
            ids = self.tok.encode(f.read().decode(), add_special_tokens=False).ids
        bos, eos = self.tok.token_to_id("<s>"), self.tok.token_to_id("</s>")
        prefix = os.path.join(self.dir, "eos")
        for flag, want in [("none", ids), ("4", [bos] + ids + [4]), ("auto", [bos] + ids + [eos])]:
            r = run("-o", prefix, "--tokenizer", self.json, "--eos", flag, path)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(read_dataset(prefix)[1], [want], flag)
        r = run("-o", prefix, "--tokenizer", self.json, "--eos", "999999", path)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--eos 999999: the tokenizer has", r.stderr)


class Gpt2StyleTest(_Agreement, unittest.TestCase):
    style = "gpt2"


class DeepSeekStyleTest(_Agreement, unittest.TestCase):
    style = "deepseek"


class Qwen2StyleTest(_Agreement, unittest.TestCase):
    style = "qwen2"


class HostileTokenizerTest(unittest.TestCase):
    """Files the tool must refuse, each with the file, the JSON path and the value."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.input = os.path.join(cls.dir, "in.txt")
        with open(cls.input, "w") as f:
            f.write("some text\n")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(["some text here", "more text there"] * 50, trainer)
        cls.good = json.loads(tok.to_str())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def refused(self, content, *messages, eos="none"):
        path = os.path.join(self.dir, "t.json")
        for name in ("out.bin", "out.idx"):
            if os.path.exists(os.path.join(self.dir, name)):
                os.remove(os.path.join(self.dir, name))
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else json.dumps(content).encode())
        r = run("-o", os.path.join(self.dir, "out"), "--tokenizer", path, "--eos", eos, self.input)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("--tokenizer '%s': " % path, r.stderr)
        for m in messages:
            self.assertIn(m, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out.bin")))

    def edited(self, edit):
        t = json.loads(json.dumps(self.good))
        edit(t)
        return t

    def test_the_good_file_works(self):
        r = run("-o", os.path.join(self.dir, "ok"), "--tokenizer", os.path.join(self.dir, "good.json"), self.input)
        self.assertEqual(r.returncode, 1)  # not written yet: the error names the file
        self.assertIn("no such file", r.stderr)
        with open(os.path.join(self.dir, "good.json"), "w") as f:
            json.dump(self.good, f)
        r = run("-o", os.path.join(self.dir, "ok"), "--tokenizer", os.path.join(self.dir, "good.json"),
                "--eos", "none", self.input)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_merges_written_as_strings(self):
        # The format of files saved before tokenizers 0.20 (Llama-3's among them): "a b".
        t = self.edited(lambda t: t["model"].update(merges=[" ".join(m) for m in t["model"]["merges"]]))
        path = os.path.join(self.dir, "strings.json")
        with open(path, "w") as f:
            json.dump(t, f)
        text = "some text here, more text there: sometext\n"
        with open(os.path.join(self.dir, "s.txt"), "w") as f:
            f.write(text)
        prefix = os.path.join(self.dir, "strings")
        r = run("-o", prefix, "--tokenizer", path, "--eos", "none", os.path.join(self.dir, "s.txt"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read_dataset(prefix)[1], [Tokenizer.from_file(path).encode(text).ids])

    def test_not_json(self):
        self.refused(b"", "the file is empty")
        whole = json.dumps(self.good).encode()
        self.refused(whole[:len(whole) // 2], "not valid JSON at byte ")
        self.refused(b"[1, 2]", "expected a JSON object, found array")
        self.refused(b"[" * 100000 + b"]" * 100000, "nested deeper than 64 levels")

    def test_huge(self):
        path = os.path.join(self.dir, "huge.json")
        with open(path, "wb") as f:
            f.truncate(300 << 20)  # sparse
        r = run("-o", os.path.join(self.dir, "out"), "--tokenizer", path, self.input)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--tokenizer '%s': " % path, r.stderr)
        self.assertIn("limit", r.stderr)

    def test_unsupported_parts(self):
        self.refused(self.edited(lambda t: t["model"].update(type="WordPiece")), 'model.type: WordPiece: only BPE')
        self.refused(self.edited(lambda t: t["model"].update(byte_fallback=True)), "model.byte_fallback: true")
        self.refused(self.edited(lambda t: t["model"].update(dropout=0.1)), "model.dropout: 0.1")
        self.refused(self.edited(lambda t: t.update(normalizer={"type": "NFKC"})), "normalizer: ", "NFKC",
                     "supported are null and NFC")
        self.refused(self.edited(lambda t: t.update(pre_tokenizer={"type": "Metaspace"})),
                     "pre_tokenizer.type: Metaspace")
        self.refused(self.edited(lambda t: t["pre_tokenizer"].update(add_prefix_space=True)),
                     "pre_tokenizer.add_prefix_space: true")
        split = {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Removed", "invert": False}
        self.refused(self.edited(lambda t: t.update(pre_tokenizer={
            "type": "Sequence", "pretokenizers": [split, t["pre_tokenizer"]]})),
            'pre_tokenizer.pretokenizers[0].behavior: "Removed": only Isolated')
        for pattern, message in [(r"(?<=a)b", "look behind"), (r"\bword", "look behind"), (r"x*", "empty string"),
                                 (r"\h+", "\\h"), (r"^a", "^"), (r"(unclosed", "not a regex PCRE2 reads")]:
            split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
            self.refused(self.edited(lambda t: t.update(pre_tokenizer={
                "type": "Sequence", "pretokenizers": [split, t["pre_tokenizer"]]})),
                "pre_tokenizer.pretokenizers[0].pattern.Regex: ", message)
        self.refused(self.edited(lambda t: t.update(post_processor={"type": "BertProcessing"})),
                     "post_processor.type: BertProcessing")
        self.refused(self.edited(lambda t: t["added_tokens"][0].update(lstrip=True)), "added_tokens[0].lstrip: true")
        self.refused(self.edited(lambda t: t.update(truncation={"max_length": 5})), "truncation: ")

    def test_broken_vocab_and_merges(self):
        first = self.good["model"]["merges"][0]
        left = first[0] if isinstance(first, list) else first.split(" ")[0]
        self.refused(self.edited(lambda t: t["model"]["merges"].append(["nope", left])),
                     "model.merges[%d]: " % len(self.good["model"]["merges"]), '"nope" is not in model.vocab')
        self.refused(self.edited(lambda t: t["model"]["merges"].append(["e", "e"])), 'merged token "ee"')
        self.refused(self.edited(lambda t: t["model"]["merges"].append("a b c")), "two tokens separated by one space")
        self.refused(self.edited(lambda t: t["model"]["merges"].append(first)), "repeats an earlier merge")
        self.refused(self.edited(lambda t: t["model"]["merges"].append(7)), "model.merges[")
        self.refused(self.edited(lambda t: t["model"]["vocab"].update(dup=5)), "id 5 is also the id of")
        self.refused(self.edited(lambda t: t["model"]["vocab"].update(x="5")), 'model.vocab["x"]: expected a token id')
        self.refused(self.edited(lambda t: t["model"]["vocab"].update(x=-1)), "outside 0..")
        self.refused(self.edited(lambda t: t["model"]["vocab"].pop("Ġ")), "model.vocab: no entry", "byte 0x20")
        self.refused(self.edited(lambda t: t["model"].update(vocab=[])), "model.vocab: expected an object")
        self.refused(self.edited(lambda t: t["model"].pop("merges")), 'model: missing member "merges"')
        self.refused(self.edited(lambda t: t["added_tokens"].append({"id": 3, "content": "zz"})),
                     "added_tokens[1].id: id 3 of")
        self.refused(self.edited(lambda t: t["added_tokens"].append({"id": "x", "content": "zz"})),
                     "added_tokens[1].id: expected a token id")

    def test_conflicting_flags(self):
        for other in (["--model", "m.model"], ["--train-vocab", "1000"]):
            r = run("-o", os.path.join(self.dir, "out"), "--tokenizer", "t.json", *other, self.input)
            self.assertEqual(r.returncode, 2)
            self.assertIn("--tokenizer excludes --model and --train-vocab", r.stderr)

    def test_eos_auto_needs_a_template(self):
        self.refused(self.good, "no TemplateProcessing", eos="auto")
        self.refused(self.edited(lambda t: t.update(post_processor={
            "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<q>", "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {}})), 'post_processor.special_tokens["<q>"]')


if __name__ == "__main__":
    unittest.main()
