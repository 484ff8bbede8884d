#!/usr/bin/env python3
"""Expected tokenizer ids and chat-template renderings from INDEPENDENT implementations.

Token ids come from Hugging Face `tokenizers` loading the published Qwen3 tokenizer.json;
chat renderings from `jinja2` running the published chat_template the way transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks). The C tests (tests/test_tokenizer.c,
tests/test_chat.c) read the two JSON files this writes; CI has no PyPI, so both are committed.

    pip install tokenizers jinja2
    python3 tests/data/gen_tokenizer_expected.py [../shared/tokenizers/qwen3]

Inputs are stored as hex bytes so that invalid UTF-8 can be tested: HF tokenizers only takes
Python strings, so for such inputs the expectation is HF's ids for
bytes.decode("utf-8", "replace") (one U+FFFD per maximal ill-formed subpart), which is the
documented behaviour of the C tokenizer. parse_special = 0 cases use HF's
encode_special_tokens = True (special tokens are plain text, non-special added tokens still
match), which is what the C tokenizer does with parse_special = 0.
"""
import gzip
import json
import os
import random
import sys
import unicodedata

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))

PARAGRAPH = (
    "Large language models are evaluated on many benchmarks. In 2023, researchers reported "
    "that a 7B-parameter model reached 56.8% on MMLU, while larger ones (70B+) exceeded 68.9%. "
    "Quantization to 4 bits reduces memory by ~4x; however, it can cost 0.1-0.5 points of "
    "accuracy. See https://arxiv.org/abs/2307.09288 for details -- or don't!"
)

# (name, text or bytes, parse_special)
CASES = [
    ("empty", "", 1),
    ("ascii_hello", "Hello world", 1),
    ("ascii_sentence", "Hello, world! How are you today?", 1),
    ("pangram", "The quick brown fox jumps over the lazy dog.", 1),
    ("digits", "1234567890", 1),
    ("long_numbers", "3.14159265358979323846 and 1,000,000,000 and 2024-01-15T12:34:56Z", 1),
    ("contractions", "I'm sure you're right, they've said it's what we'll do and he'd agree, "
     "don't you?", 1),
    ("contractions_upper", "I'M SURE YOU'RE RIGHT, THEY'VE SAID IT'S WHAT WE'LL DO AND HE'D "
     "AGREE, DON'T", 1),
    ("contractions_mixed", "'s's 'S'T 'Re 'vE 'lL 'D x's", 1),
    ("contraction_long_s", "it\u017f \u2019s 'ſ 'K", 1),
    ("chinese", "你好，世界！今天天气很好。我们来测试一下分词器。", 1),
    ("japanese", "こんにちは、世界。カタカナとひらがなと漢字を混ぜた文章です。", 1),
    ("korean", "안녕하세요, 세계! 한국어 텍스트입니다.", 1),
    ("emoji", "I love 🍕 and 🎉! 😀😃😄", 1),
    ("emoji_zwj", "👨‍👩‍👧‍👦 family and 🏳️‍🌈 flag", 1),
    ("emoji_skin_tones", "👍🏽 👋🏿 🧑🏻‍💻 👩🏼‍🦰", 1),
    ("emoji_flags", "🇯🇵🇺🇸🇩🇪", 1),
    ("nfd_acute", "Cafe\u0301 re\u0301sume\u0301 vs caf\u00e9", 1),
    ("nfd_ring", "A\u030angstr\u00f6m and \u212b", 1),
    ("nfd_hangul_jamo", "\u1100\u1161\u11a8\u1102\u1161", 1),
    ("combining_zalgo", "Z\u0351\u036b\u0343\u036a\u0302a\u0308\u0304l", 1),
    ("whitespace_runs", "a   b    c     d      e", 1),
    ("tabs", "\tindented\t\ttext\t", 1),
    ("crlf", "line one\r\nline two\r\n\r\nline four\r", 1),
    ("trailing_spaces", "trailing spaces   ", 1),
    ("newlines", "para one\n\n\n\npara two\n\n", 1),
    ("mixed_space_newline", "   \n  \n\t x  \n \r\n  y", 1),
    ("unicode_spaces", "a\u00a0b\u3000c\u2003d\u0085e\u180ef\u2028g\u202fh", 1),
    ("special_chatml", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 1),
    ("special_think", "<think>\nLet me think.\n</think>\n\nThe answer is 42.", 1),
    ("special_tool_call", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 1),
    ("special_adjacent", "<|endoftext|><|im_end|><|im_start|><|fim_prefix|>x<|fim_suffix|>", 1),
    ("special_near_misses", "<|im_start| <|im_end| |im_end|> <|unknown|> <thinking> <|im_start|>",
     1),
    ("special_not_parsed", "<|im_start|>user\nhi<|im_end|> <|endoftext|>", 0),
    ("user_defined_when_not_parsing", "<think>x</think> <|im_end|><tool_call>", 0),
    ("code_python", "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n", 1),
    ("code_c", "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}", 1),
    ("url", "https://example.com/path/to/page?query=1&b=%20x#frag", 1),
    ("email", "contact: john.doe+tag@example.co.uk", 1),
    ("punctuation_runs", "!!!??? ... --- ***,,,;;; :) (-: <<>> [[]] \"'\"''", 1),
    ("arabic", "مرحبا بالعالم! هذا نص عربي.", 1),
    ("hindi", "नमस्ते दुनिया, यह हिंदी पाठ है।", 1),
    ("thai", "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรค", 1),
    ("cyrillic_greek", "Привет, мир! Γειά σου Κόσμε!", 1),
    ("hebrew", "שלום עולם", 1),
    ("mixed_scripts", "GPT-4o costs $0.005/1K tokens (≈€0.0046) in 2024年", 1),
    ("math", "∑_{i=1}^{n} x_i² ≤ √(n)·∞ ⇒ ∀ε>0", 1),
    ("math_alnum", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 ℌ", 1),
    ("fullwidth", "ＡＢＣ１２３！", 1),
    ("other_digits", "٣٤٥ ४५६ ๓๔๕ ¹²³ ½", 1),
    ("invalid_looking", "\ufffd\ufffd replacement, zero\u200bwidth, \ufeffBOM, \ue000 private", 1),
    ("nul_and_controls", "a\x00b\x01\x02\x1b[0m\x7f", 1),
    ("repeated_char", "a" * 100, 1),
    ("long_spaces", " " * 50 + "x" + " " * 17, 1),
    ("paragraph", PARAGRAPH, 1),
    ("invalid_bytes", b"abc\xff\xfedef", 1),
    ("invalid_truncated", b"caf\xc3", 1),
    ("invalid_partial_3byte", b"\xe2\x82 euro \xe2\x82\xac", 1),
    ("invalid_surrogate", b"\xed\xa0\x80 surrogate", 1),
    ("invalid_overlong_partial_emoji", b"\xf0\x9f\x98 partial\xc0\xaf overlong \xf4\x90\x80\x80",
     1),
    ("invalid_around_special", b"\xc3<|im_end|>\x80", 1),
]

CHAT_CASES = [
    ("user_only", [("user", "Hello!")], 1, 1),
    ("user_only_no_think", [("user", "Hello!")], 1, 0),
    ("system_user", [("system", "You are a helpful assistant."), ("user", "What is 2+2?")], 1, 1),
    ("system_user_no_think", [("system", "You are terse."), ("user", "What is 2+2?")], 1, 0),
    ("multi_turn_strips_old_reasoning", [
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"),
        ("user", "Tell me a joke."),
    ], 1, 1),
    ("multi_turn_no_think", [
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Bye"),
    ], 1, 0),
    ("final_assistant_keeps_reasoning", [
        ("user", "2+2?"),
        ("assistant", "<think>\n\nsimple addition\n\n</think>\n\n\n4"),
    ], 0, 1),
    ("final_assistant_without_reasoning", [
        ("user", "2+2?"),
        ("assistant", "4"),
    ], 0, 1),
    ("assistant_multiple_think_tags", [
        ("user", "q"),
        ("assistant", "pre<think>a</think>mid<think>b</think>\npost"),
        ("user", "q2"),
        ("assistant", "x<think>\nr1\n<think>r2\n\n</think>\n\nanswer</think>tail"),
    ], 0, 1),
    ("tool_turns", [
        ("system", "You can call tools."),
        ("user", "Weather in Paris?"),
        ("assistant", "<think>\nI should call the tool.\n</think>\n\nLet me check."),
        ("tool", "{\"temp\": 21}"),
        ("tool", "{\"sky\": \"clear\"}"),
    ], 1, 1),
    ("tool_response_in_user_role", [
        ("user", "Question"),
        ("assistant", "<think>\nthinking one\n</think>\n\ncalling"),
        ("user", "<tool_response>\nresult\n</tool_response>"),
        ("assistant", "<think>\nthinking two\n</think>\n\nfinal"),
    ], 1, 1),
    ("second_system", [
        ("user", "a"),
        ("system", "late system"),
        ("user", "b"),
    ], 1, 1),
    ("no_generation_prompt", [("system", "S"), ("user", "U")], 0, 0),
    ("unicode_content", [("user", "你好 👋\n\ttabs\r\n"), ("assistant", "<think></think>Ok")],
     1, 1),
]


# Random mixtures of the classes above (letters, digits, Unicode spaces, punctuation, scripts,
# combining marks, emoji, special tokens, contractions, a few corrupted bytes): a fixed seed, so
# the committed file is reproducible.
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
    " \t\n\r\u00a0\u3000\u2003\u0085\u180e\u2028\u200b\u202f\v\f",
    "'\".,;:!?()[]{}<>|/\\-_=+*&^%$#@~`", "你好世界中文测试分词器的是了", "こんにちはカタカナ漢字ー",
    "안녕하세요한국어", "مرحبابالعالم", "नमस्तेदुनिया्ािीु", "สวัสดีชาวโลก่้", "Привет мир",
    "éèêëàâäôöûüçñ", "\u0301\u0308\u030a\u0327\u0323", "😀🎉🍕👍🏽👨‍👩‍👧\u200d\ufe0f🇯🇵", "ſKÅ",
    "٣٤٥४५६๓¹²½", "𝔘𝔫𝟙𝟚",
]
PIECES = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
          "<|fim_prefix|>", "<|im_start|", "'s", "'LL", "'ve"]
N_RANDOM = 200


def random_cases():
    rnd = random.Random(20260817)
    out = []
    for i in range(N_RANDOM):
        parts = []
        for _ in range(rnd.randint(0, 40)):
            if rnd.random() < 0.05:
                parts.append(rnd.choice(PIECES))
            else:
                pool = rnd.choice(POOLS)
                parts.append("".join(rnd.choice(pool) for _ in range(rnd.randint(1, 6))))
        data = "".join(parts)
        if rnd.random() < 0.1:
            b = bytearray(data.encode("utf-8"))
            for _ in range(rnd.randint(1, 3)):
                if b:
                    b[rnd.randrange(len(b))] = rnd.randrange(256)
            data = bytes(b)
        ps = 1 if rnd.random() < 0.8 else 0
        if "<|fim" in (data if isinstance(data, str) else data.decode("utf-8", "replace")):
            ps = 1  # see docs/tokenizer.md: GGUF marks <|fim_*|> CONTROL, HF keeps them non-special
        out.append((f"random_{i:03d}", data, ps))
    return out


def hf_encode(tok, data, parse_special):
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    tok.encode_special_tokens = not parse_special
    ids = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return text, ids


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../../shared/tokenizers/qwen3")
    with gzip.open(os.path.join(src, "tokenizer.json.gz"), "rt", encoding="utf-8") as f:
        tok = Tokenizer.from_str(f.read())
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        chat_template = json.load(f)["chat_template"]

    cases = []
    for name, data, ps in CASES + random_cases():
        raw = data if isinstance(data, bytes) else data.encode("utf-8")
        text, ids = hf_encode(tok, data, ps)
        valid = not isinstance(data, bytes)
        nfc_stable = valid and unicodedata.normalize("NFC", text) == text
        if nfc_stable:  # the independent decoder must give the text back too
            assert tok.decode(ids, skip_special_tokens=False) == text, name
        decoded = tok.decode(ids, skip_special_tokens=False)
        cases.append({"name": name, "hex": raw.hex(), "parse_special": ps, "ids": ids,
                      "roundtrip": nfc_stable, "text": text, "decoded": decoded})
    out = {"generator": "tests/data/gen_tokenizer_expected.py",
           "tokenizers_version": tokenizers.__version__, "cases": cases}
    with open(os.path.join(HERE, "tokenizer_expected.json"), "w", encoding="utf-8") as f:
        # One case per line keeps the file small and its diffs readable.
        head = json.dumps({k: v for k, v in out.items() if k != "cases"}, ensure_ascii=False)
        f.write(head[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(chat_template)
    chats = []
    for name, msgs, agp, think in CHAT_CASES:
        messages = [{"role": r, "content": c} for r, c in msgs]
        kw = {"messages": messages, "add_generation_prompt": bool(agp)}
        if not think:
            kw["enable_thinking"] = False
        chats.append({"name": name, "messages": messages, "add_generation_prompt": agp,
                      "enable_thinking": think, "expected": tmpl.render(**kw)})
    out = {"generator": "tests/data/gen_tokenizer_expected.py", "jinja2_version": jinja2.__version__,
           "cases": chats}
    with open(os.path.join(HERE, "tokenizer_expected_chat.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} tokenizer cases, {len(chats)} chat cases")


if __name__ == "__main__":
    main()
