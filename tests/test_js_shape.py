"""The shape of the hand-written JavaScript in src/transformer/static/: short files and
functions, the layers in layers.js and decoding in transformer.js under the names of the Python
modules they mirror, which scripts each script needs (as ARCHITECTURE.md lists them), and the
package's constants (token ids, the length limit, LayerNorm's and Adam's numbers) written out
again with the package's values.

No JavaScript engine is needed: a small scanner reads each script (skipping strings, template
text, regular expressions and comments), finds every function body (`function name(...) {`,
`(...) => {`, a method `name(...) {`) and its closing brace, and counts its lines from the line
where the function begins to the closing brace. The one function not counted is a file's
wrapper, the function its code begins with (`(() => { ... })();`, or `function module(scope)
{ ... }` called below it), which keeps the script's names private: it is the file, not a
function of it; the functions inside it are counted.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parents[1] / "src" / "transformer" / "static"
SCRIPTS = sorted(STATIC.glob("*.js"))
MAX_LINES = 60  # a function's
MAX_FILE_LINES = 600  # a script's
# multihead.py, encoder.py, decoder.py, model.py, decoding.py: what layers.js (the model, once
# for the translator and the trainer) and transformer.js (decoding) must define
MIRRORED = {
    "layers.js": ["multiHeadAttention", "encoderLayer", "decoderLayer", "encode"],
    "transformer.js": ["decodeStep", "beamSearch"],
}
BLOCKS = {"if", "for", "while", "switch", "catch", "with"}  # keyword (...) { is no function
# after these a "/" begins a regular expression, not a division
REGEX_AFTER = set("(,=:[!&|?{};+-*%<>~^") | {"=>", "return", "typeof", "case", "do", "else"}
REGEX_AFTER |= {"in", "of", "new", "delete", "void", "throw", "yield", "await"}


@dataclass
class Token:
    text: str
    line: int


@dataclass
class Function:
    name: str
    first: int  # the line it begins on
    last: int  # the line of its closing brace

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


class Scanner:
    """A script's identifiers, numbers and punctuation, each with its line; strings, template
    text, regular expressions and comments left out (a template's ${...} parts are kept)."""

    def __init__(self, source: str):
        self.source, self.i, self.line = source, 0, 1
        self.tokens: list[Token] = []
        self.depth = 0  # of braces
        self.templates: list[int] = []  # per open template: the depth of its open ${, or -1
        while self.i < len(source):
            self.step()

    def step(self) -> None:
        s, i = self.source, self.i
        c = s[i]
        if c.isspace():
            self.line += c == "\n"
            self.i += 1
        elif s.startswith("//", i):
            self.i = s.find("\n", i) if "\n" in s[i:] else len(s)
        elif s.startswith("/*", i):
            self.skip_to(s.index("*/", i) + 2)
        elif c in "'\"":
            self.quoted(c)
        elif c == "`":
            self.templates.append(-1)
            self.template_text(i + 1)
        elif c == "/" and (not self.tokens or self.tokens[-1].text in REGEX_AFTER):
            self.regex()
        elif c.isalnum() or c in "_$":
            word = re.match(r"[\w$]+", s[i:]).group()
            self.add(word, i + len(word))
        elif s.startswith("=>", i):
            self.add("=>", i + 2)
        elif c == "}" and self.templates and self.templates[-1] == self.depth:
            self.depth -= 1  # the end of a template's ${...}: back to its text
            self.template_text(i + 1)
        else:
            self.depth += (c == "{") - (c == "}")
            self.add(c, i + 1)

    def add(self, text: str, end: int) -> None:
        self.tokens.append(Token(text, self.line))
        self.i = end

    def skip_to(self, end: int) -> None:
        self.line += self.source.count("\n", self.i, end)
        self.i = end

    def quoted(self, quote: str) -> None:
        j = self.i + 1
        while self.source[j] != quote:
            j += 2 if self.source[j] == "\\" else 1
        self.skip_to(j + 1)

    def template_text(self, j: int) -> None:
        """From j inside a template's text, to its closing ` or its next ${."""
        s = self.source
        while s[j] != "`" and not s.startswith("${", j):
            j += 2 if s[j] == "\\" else 1
        if s[j] == "`":
            self.templates.pop()
            self.skip_to(j + 1)
        else:
            self.depth += 1
            self.templates[-1] = self.depth
            self.skip_to(j + 2)

    def regex(self) -> None:
        s, j, in_class = self.source, self.i + 1, False
        while in_class or s[j] != "/":
            in_class = (in_class or s[j] == "[") and s[j] != "]"
            j += 2 if s[j] == "\\" else 1
        flags = re.match(r"\w*", s[j + 1 :]).group()
        self.add("/regex/", j + 1 + len(flags))


def matching(toks: list[Token], at: int, step: int) -> int:
    """The index of the bracket that matches toks[at], searching forward (1) or back (-1)."""
    pairs = {"(": ")", "{": "}", "[": "]", ")": "(", "}": "{", "]": "["}
    opening, closing, level = toks[at].text, pairs[toks[at].text], 0
    for j in range(at, len(toks) if step > 0 else -1, step):
        level += (toks[j].text == opening) - (toks[j].text == closing)
        if level == 0:
            return j
    raise ValueError(f"unbalanced {opening} at line {toks[at].line}")


def function_at(toks: list[Token], at: int) -> tuple[int, str] | None:
    """Where the function whose body toks[at] ("{") opens begins, and its name ("" if it has
    none); None where the brace opens no function's body."""
    if toks[at - 1].text == "=>":  # (...) => {  or  x => {
        params = at - 2
        start = matching(toks, params, -1) if toks[params].text == ")" else params
        named = start - 1 - (toks[start - 1].text == "async")  # the = or : before it
        return start, toks[named - 1].text if toks[named].text in ("=", ":") else ""
    if toks[at - 1].text == ")":  # function name(...) {,  function (...) {,  name(...) {
        start = matching(toks, at - 1, -1) - 1
        name = toks[start].text
        if start < 0 or name in BLOCKS or not re.fullmatch(r"[\w$]+", name):
            return None
        if name == "function":
            return start, ""
        return (start - 1 if toks[start - 1].text == "function" else start), name
    return None


def functions(source: str) -> list[Function]:
    """Every function of the script with a body in braces, but the file's wrapper."""
    toks, found = Scanner(source).tokens, []
    for at in range(1, len(toks)):
        if toks[at].text == "{" and (where := function_at(toks, at)):
            start, name = where
            # the wrapper begins the code: "function" (token 0) or "(() => {" (token 1)
            if start > 1:
                end = matching(toks, at, 1)
                found.append(Function(name or "(anonymous)", toks[start].line, toks[end].line))
    return found


def test_the_scanner():
    """It finds declarations, arrows and methods, past strings, templates, regexes and comments,
    and leaves the wrapper out."""
    source = """(() => {
  const a = "}{'\\"", b = `x ${ {y: 1}.y } \\` }`, c = /[}/]\\//g;  // }
  function f(x) {
    return x / 2;
  }
  const g = async (u, v) => {
    /* } */
    return `${u.map(w => { return w; })}`;
  };
  const o = {h(z) { return z; }};
  if (a) { f(1); } else { o.h(2); }
})();
"""
    got = {(f.name, f.first, f.last) for f in functions(source)}
    assert got == {("f", 3, 5), ("g", 6, 9), ("(anonymous)", 8, 8), ("h", 10, 10)}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_files_are_short(script):
    """No script is longer than MAX_FILE_LINES lines: a longer one holds more than one concern."""
    lines = len(script.read_text().splitlines())
    assert lines <= MAX_FILE_LINES, f"{script.name}: {lines} lines"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_functions_are_short(script):
    """No function of the page's scripts is longer than MAX_LINES lines."""
    long = [f for f in functions(script.read_text()) if f.lines > MAX_LINES]
    assert not long, ", ".join(f"{f.name} (line {f.first}, {f.lines} lines)" for f in long)


@pytest.mark.parametrize("script", sorted(MIRRORED))
def test_the_model_mirrors_the_modules(script):
    """layers.js defines the forward pass and transformer.js decoding under the Python modules'
    names; no other script defines the layers again."""
    names = {f.name for f in functions((STATIC / script).read_text())}
    assert not set(MIRRORED[script]) - names, sorted(set(MIRRORED[script]) - names)
    layers = set(MIRRORED["layers.js"]) - {"encode"}  # transformer.js's encode: one sentence
    for other in (s for s in SCRIPTS if s.name != "layers.js"):
        again = layers & {f.name for f in functions(other.read_text())}
        assert not again, f"{other.name} defines {sorted(again)} again"


def python_constants() -> dict[str, float]:
    """The package's values of the constants that the page's scripts write out again."""
    import inspect

    import torch

    from transformer import decoding, reversal, tokenizer
    from transformer.normalization import LayerNorm
    from transformer.training import make_optimizer

    adam = make_optimizer(torch.nn.Linear(2, 2), d_model=2, warmup=1)[0].defaults
    values = {name: getattr(tokenizer, name) for name in ("PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID")}
    values |= {n: getattr(reversal, n) for n in ("FIRST", "N_SYMBOLS", "MIN_LENGTH", "MAX_LENGTH")}
    return values | {
        "EXTRA_LENGTH": decoding.EXTRA_LENGTH,
        "LN_EPS": inspect.signature(LayerNorm).parameters["eps"].default,
        "BETA1": adam["betas"][0],
        "BETA2": adam["betas"][1],
        "ADAM_EPS": adam["eps"],
    }


# NAME = number, as the scripts declare their constants (const A = 1, B = 2;)
CONSTANT = re.compile(r"\b([A-Z][A-Z0-9_]*) = (-?[0-9][0-9.e+-]*)(?=[,;])")


@pytest.mark.parametrize(
    "script, names",
    [
        ("common.js", ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID"]),
        ("transformer.js", ["EXTRA_LENGTH"]),
        ("layers.js", ["LN_EPS"]),
        ("trainer.js", ["FIRST", "N_SYMBOLS", "MIN_LENGTH", "MAX_LENGTH"]),
        ("trainer.js", ["BETA1", "BETA2", "ADAM_EPS"]),
    ],
)
def test_constants_are_the_packages(script, names):
    """Each number that a script writes out again, named as the package names it, has the
    package's value: a copy that drifts from its source fails here."""
    declared = {
        name: float(value) for name, value in CONSTANT.findall((STATIC / script).read_text())
    }
    expected = python_constants()
    for name in names:
        assert name in declared, f"{script} declares no {name}"
        assert declared[name] == expected[name], f"{script}: {name} = {declared[name]}"


ARCHITECTURE = STATIC.parents[2] / "ARCHITECTURE.md"
ROW = re.compile(r"^\| `(\w+\.js)` \| [^|]+ \| (`\w+`|–) \| (.+) \|$", re.M)


def globals_of(source: str) -> tuple[set[str], set[str]]:
    """The transformer* globals a script leaves (window.X = ..., scope.X = ...) and those of
    other scripts it reads."""
    toks = [t.text for t in Scanner(source).tokens] + ["", ""]
    left, read = set(), set()
    for i in range(len(toks) - 4):
        if toks[i] in ("window", "scope", "self") and toks[i + 1] == ".":
            if toks[i + 2].startswith("transformer"):
                assigned = toks[i + 3] == "=" and toks[i + 4] != "="
                (left if assigned else read).add(toks[i + 2])
    return left, read - left


def test_architecture_names_what_each_script_needs():
    """ARCHITECTURE.md's table of the static files has a row for every script, and a script
    needs (reads the globals of) exactly the scripts its row names."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## The static files") :]
    rows = {name: (left, needs) for name, left, needs in ROW.findall(section)}
    assert sorted(rows) == sorted(s.name for s in SCRIPTS), "ARCHITECTURE.md's scripts differ"
    found = {s.name: globals_of(s.read_text()) for s in SCRIPTS}
    owner = {g: name for name, (left, _) in found.items() for g in left}
    for name, (left, needs) in rows.items():
        if left != "–":
            assert left.strip("`") in found[name][0], f"{name} does not leave {left}"
        reads = {owner.get(g, g) for g in found[name][1]}
        assert reads == set(re.findall(r"`(\w+\.js)`", needs)), f"{name} reads {reads}"
