"""The C++ service's tokenizer against Hugging Face `tokenizers` (the library the Rust driver uses) on one
tokenizer.json: token ids of encode() and the text of decode(skip_special_tokens=True), on hand-picked hard cases
(contractions, digit runs, whitespace runs and Unicode White_Space, special tokens inside text, scripts, emoji,
combining marks, numerics of every N category), the repository's own docs line by line, random strings of
assigned Unicode code points, and random id sequences (which split multi-byte characters: U+FFFD handling).

usage: check_tokenizer.py SERVICE_BINARY MODEL_DIR [--random N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[3]

HAND_PICKED = [
    "",
    "Hello, world!",
    "What is the capital of France, and why is it famous?",
    "I'm sure you're right; they'll see it's what we'd do, I've said.",
    "I'M SURE YOU'RE RIGHT, THEY'LL SEE",
    "'s 't 're 've 'm 'll 'd ''s",
    "1234567890 3.14159 -42 1e-9 0x1F",
    "a  b   c    d",
    "trailing spaces   ",
    "   leading spaces",
    "line1\n\nline2\n",
    "\ttabs\tand\r\nCRLF\r\n",
    "\n\n\n",
    " ",
    "    ",
    "a\u00a0b\u2009c\u3000d\u202fe\u205ff\u1680g",  # Unicode spaces (Zs)
    "x\u0085y\u2028z\u2029w\u000bv\u000cu",  # NEL, line/paragraph separators, VT, FF
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "caf\u00e9 na\u00efve \u03a9mega \u00df\u00e6\u00f8\u00e5",
    "e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937",  # combining marks (Mn/Mc)
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u4e2d\u6587\u6d4b\u8bd5\uff0c\u5168\u89d2\uff01\uff1f",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0663\u0664\u0665",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439\u0442\u0435",
    "\U0001f642\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f",
    "\u00bd \u2153 \u216b \u2167 \u0663 \u0969 \u2460 \U0001d7d9 \u00b2",  # No, Nl, Nd in several scripts
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_start|><|im_end|>",
    "<|im_start partial <|im_end and <|endoftext|> end",
    "text<|im_end|>text",
    "!!!???... ---- ==== ____ \u2014 \u2026 \u00ab\u00bb \u201cquotes\u201d",
    "def f(x):\n    return x ** 2  # comment\n",
    "https://example.com/path?q=1&r=%20#frag",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "$100.00 \u20ac99,99 \u00a5500 \u00a32",
    "\U00010348\U0001f600\U00020000",  # Gothic letter, emoji, CJK ext B
    "a" * 300,
    " ".join(["word"] * 200),
]


def doc_lines() -> list[str]:
    lines: list[str] = []
    for rel in ["README.md", "docs/user-guide.md", "models/LLAMA_MODEL_DIR.md"]:
        p = ROOT / rel
        if p.is_file():
            lines += [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return lines


def random_strings(n: int, rng: random.Random) -> list[str]:
    """Strings of assigned, non-surrogate, non-private code points, mixed with ASCII, spaces and digits so the
    pre-tokenizer's classes meet. Assigned in Unicode 3.2 (unicodedata.ucd_3_2_0), not in this Python's version: the
    same strings on every machine, of characters that the system's PCRE2 and HF tokenizers' tables both know
    (a character new in a recent Unicode could be a letter to one and unassigned to the other)."""
    pools = [
        [chr(c) for c in range(0x20, 0x7F)],
        [" ", " ", "  ", "\n", "\t", "\u00a0", "\u3000"],
        [str(d) for d in range(10)],
    ]
    out = []
    for _ in range(n):
        s = []
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.4:
                while True:
                    c = chr(rng.randint(0xA0, 0x2FFFF))
                    if unicodedata.ucd_3_2_0.category(c) not in ("Cn", "Cs", "Co"):
                        break
                s.append(c)
            else:
                s.append(rng.choice(rng.choice(pools)))
        out.append("".join(s))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("service")
    ap.add_argument("model_dir")
    ap.add_argument("--random", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tok = Tokenizer.from_file(str(Path(args.model_dir) / "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=True)

    texts = HAND_PICKED + doc_lines() + random_strings(args.random, rng)
    id_lists = [[rng.randrange(vocab) for _ in range(rng.randint(1, 12))] for _ in range(args.random)]
    # single bytes of multi-byte characters, alone and out of order
    byte_tokens = [tok.token_to_id(c) for c in "\u00e6\u00a8\u0134\u0129" if tok.token_to_id(c) is not None]
    id_lists += [byte_tokens, byte_tokens[::-1], byte_tokens[:1], [0, 1, 2] + byte_tokens]
    id_lists += [[28, vocab + 1000, 29], [vocab, vocab + 1]]  # ids past the vocabulary decode to nothing

    lines = [json.dumps(t) for t in texts] + [json.dumps(ids) for ids in id_lists]
    proc = subprocess.run(
        [args.service, "--model", args.model_dir, "--tokenize"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, encoding="utf-8", check=False,
    )
    if proc.returncode != 0:
        print(f"check_tokenizer: {args.service} --tokenize failed ({proc.returncode}):\n{proc.stderr}", file=sys.stderr)
        return 1
    got = [json.loads(ln) for ln in proc.stdout.split("\n") if ln]  # not splitlines: U+2028 etc. stay raw
    if len(got) != len(lines):
        print(f"check_tokenizer: {len(lines)} inputs, {len(got)} outputs", file=sys.stderr)
        return 1

    bad = 0
    for text, g in zip(texts, got):
        want_ids = tok.encode(text, add_special_tokens=False).ids
        want_text = tok.decode(want_ids, skip_special_tokens=True)
        if g["ids"] != want_ids or g["text"] != want_text:
            bad += 1
            if bad <= 5:
                print(f"MISMATCH encode {text!r}:\n  tokenizers {want_ids} {want_text!r}\n  C++        {g['ids']} "
                      f"{g['text']!r}", file=sys.stderr)
    for ids, g in zip(id_lists, got[len(texts):]):
        want = tok.decode(ids, skip_special_tokens=True)
        if g["text"] != want:
            bad += 1
            if bad <= 5:
                print(f"MISMATCH decode {ids}:\n  tokenizers {want!r}\n  C++        {g['text']!r}", file=sys.stderr)
    print(f"check_tokenizer: {len(texts)} texts encoded, {len(id_lists)} id lists decoded, {bad} mismatches "
          f"(tokenizers {getattr(__import__('tokenizers'), '__version__', '?')})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
