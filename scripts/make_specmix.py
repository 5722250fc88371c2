#!/usr/bin/env python3
"""Build datasets/specmix.jsonl: a small mix of content types whose speculative acceptance
differs, from local material only (no network, no downloads).

    make_specmix.py [OUT]     write OUT (default: datasets/specmix.jsonl beside this script's repo)

Five categories, ROWS_PER_CATEGORY rows each, every row seeded:

  code        "Continue this Python code:" + the signature and first lines of the body of
              a standard-library function (its own source, read with inspect.getsource)
  prose       "Summarize ..." / "Continue this text:" / "Explain ..." + the prose of a
              standard-library docstring; every fourth row has a second turn
  extraction  "Extract the name and year as JSON from: ..." over generated sentences
  repetition  counting, counting down, repeating words and lists; counting rows carry a
              max_tokens that fits the whole count
  math        generated arithmetic word problems; every fourth row has a second turn

code and prose read the running Python's standard library, whose sources and docstrings
change a little between versions: the committed file is the reference (built with the
Python that `.venv` runs), and tests/load/test_datasets.py checks that a rebuild gives the same
extraction, repetition and math rows byte for byte and the same shape for the rest.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import random
import re
import sys
import textwrap
from pathlib import Path

ROWS_PER_CATEGORY = 32
SEED = 20240601
CODE_LINES = 6  # lines of a function's body shown after its signature
PROSE_MIN_CHARS, PROSE_MAX_CHARS = 150, 900  # a docstring's prose: enough to summarize, short enough to be quick
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "datasets" / "specmix.jsonl"

# Pure-Python standard-library functions (a C function has no source and is skipped).
CODE_FUNCTIONS = (
    "textwrap.dedent", "textwrap.indent", "textwrap.shorten", "textwrap.fill", "shlex.quote", "shlex.split",
    "shlex.join", "fnmatch.fnmatch", "fnmatch.filter", "fnmatch.translate", "posixpath.normpath",
    "posixpath.relpath", "posixpath.commonpath", "posixpath.expanduser", "posixpath.splitext", "string.capwords",
    "difflib.get_close_matches", "difflib.unified_diff", "calendar.isleap", "calendar.leapdays",
    "calendar.monthrange", "colorsys.rgb_to_hsv", "colorsys.hsv_to_rgb", "colorsys.rgb_to_hls",
    "statistics.median", "statistics.mode", "statistics.variance", "html.escape", "heapq.nlargest",
    "heapq.nsmallest", "heapq.merge", "urllib.parse.urljoin", "urllib.parse.urlencode", "copy.deepcopy",
    "os.makedirs", "os.walk", "shutil.copyfileobj", "shutil.which", "json.dumps", "base64.b64encode",
    "glob.glob", "functools.total_ordering", "random.Random.shuffle", "random.Random.sample",
)
# Standard-library objects whose docstrings open with a paragraph of plain prose.
PROSE_OBJECTS = (
    "json.dumps", "json.loads", "os.walk", "os.makedirs", "shutil.rmtree", "shutil.copytree", "shutil.which",
    "subprocess.run", "subprocess.Popen", "textwrap.dedent", "textwrap.shorten", "difflib.get_close_matches",
    "difflib.SequenceMatcher", "heapq.merge", "functools.lru_cache", "functools.total_ordering",
    "functools.partial", "itertools.groupby", "collections.namedtuple", "collections.Counter",
    "collections.ChainMap", "argparse.ArgumentParser", "logging.basicConfig", "logging.Logger",
    "pathlib.PurePath", "random.Random.shuffle", "random.Random.sample", "statistics.median",
    "statistics.stdev", "fnmatch.translate", "glob.glob", "tempfile.mkstemp", "tempfile.TemporaryDirectory",
    "threading.Thread", "threading.Event", "queue.Queue", "contextlib.contextmanager", "contextlib.ExitStack",
    "dataclasses.dataclass", "enum.Enum", "re.sub", "urllib.parse.urlparse", "zipfile.ZipFile",
    "csv.DictReader", "string.Template", "inspect.getsource", "copy.deepcopy", "shlex.split",
)
PROSE_ASKS = ("Summarize this in two sentences:", "Continue this text:", "Explain this in plain words:")
PROSE_FOLLOW_UPS = ("Now say it in one short sentence.", "Give one example of when this would be useful.")

FIRST_NAMES = ("Maria", "Ahmed", "Lena", "Kenji", "Olga", "Tomas", "Amara", "Pedro", "Ingrid", "Rahul", "Chen",
               "Fatima", "Jonas", "Sofia", "Mateo", "Yuki")
LAST_NAMES = ("Lopez", "Haddad", "Novak", "Tanaka", "Ivanova", "Berg", "Okafor", "Silva", "Larsen", "Sharma",
              "Wei", "Mansour", "Weber", "Rossi", "Garcia", "Sato")
CITIES = ("Porto", "Lagos", "Kyoto", "Tallinn", "Quito", "Graz", "Pune", "Halifax", "Cork", "Tromso")
EVENTS = (
    "In {year}, {name} opened a small bakery in {city}.",
    "{name} was born in {city} in {year} and later became a ship's engineer.",
    "The bridge in {city} was designed by {name} and finished in {year}.",
    "{name} moved to {city} in {year}, where she taught music for {n} years.",
    "After {n} attempts, {name} climbed the highest peak near {city} in {year}.",
    "The first map of the old harbour of {city} was drawn by {name} in {year}.",
    "{name} won the {city} chess open in {year} with {n} points.",
    "In the spring of {year}, {name} published a book of {n} poems about {city}.",
)
WORDS = ("apple", "river", "lantern", "signal", "copper", "meadow", "rocket", "violet")


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = specmix_rows()
    out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"{out}: {len(rows)} rows ({ROWS_PER_CATEGORY} in each of code, prose, extraction, repetition, math)")
    return 0


def specmix_rows() -> list[dict]:
    return [*code_rows(), *prose_rows(), *extraction_rows(random.Random(SEED + 1)),
            *repetition_rows(random.Random(SEED + 2)), *math_rows(random.Random(SEED + 3))]


def find(dotted: str):
    """The object `module.attr...` names, importing the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def code_rows() -> list[dict]:
    rows = []
    for dotted in CODE_FUNCTIONS:
        try:
            source = textwrap.dedent(inspect.getsource(find(dotted)))
        except (OSError, TypeError):  # a C function, or a frozen module's: no source to read
            continue
        rows.append({"category": "code", "prompt": f"Continue this Python code:\n\n{code_head(source)}\n"})
    return take(rows, "code")


def code_head(source: str) -> str:
    """A function's signature and the first CODE_LINES lines of its body, docstring left
    out: the code is what a continuation should see."""
    function = ast.parse(source).body[0]
    lines = source.splitlines()
    body = function.body
    if ast.get_docstring(function) is not None and len(body) > 1:
        body = body[1:]
    signature = lines[:function.body[0].lineno - 1]
    start = body[0].lineno - 1
    return "\n".join(signature + lines[start:start + CODE_LINES])


def prose_rows() -> list[dict]:
    rows = []
    for dotted in PROSE_OBJECTS:
        text = docstring_prose(inspect.getdoc(find(dotted)) or "")
        if len(text) < PROSE_MIN_CHARS:
            continue
        number = len(rows)
        ask = f"{PROSE_ASKS[number % len(PROSE_ASKS)]}\n\n{text}"
        if number % 4 == 3:
            rows.append({"category": "prose", "turns": [ask, PROSE_FOLLOW_UPS[number // 4 % len(PROSE_FOLLOW_UPS)]]})
        else:
            rows.append({"category": "prose", "prompt": ask})
    return take(rows, "prose")


def docstring_prose(doc: str) -> str:
    """The docstring's paragraphs of prose, each on one line, until PROSE_MAX_CHARS:
    signature lines of C docstrings and doctest examples are left out."""
    kept: list[str] = []
    for paragraph in re.split(r"\n\s*\n", doc):
        if paragraph.lstrip().startswith(">>>") or re.match(r"^[\w.]+\(.*\)( -> .*)?$", paragraph.strip()):
            continue
        line = " ".join(paragraph.split())
        if kept and len(" ".join(kept)) + len(line) > PROSE_MAX_CHARS:
            break
        kept.append(line)
    return "\n\n".join(kept)


def extraction_rows(rng: random.Random) -> list[dict]:
    rows = []
    for _ in range(ROWS_PER_CATEGORY):
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        sentence = rng.choice(EVENTS).format(name=name, year=rng.randint(1890, 2023), city=rng.choice(CITIES),
                                             n=rng.randint(2, 40))
        rows.append({"category": "extraction",
                     "prompt": f'Extract the name and year as JSON ({{"name": ..., "year": ...}}) from: {sentence}'})
    return rows


def repetition_rows(rng: random.Random) -> list[dict]:
    makers = (count_up, count_down, repeat_word, weekdays, multiples)
    return [makers[i % len(makers)](rng) for i in range(ROWS_PER_CATEGORY)]


def count_up(rng: random.Random) -> dict:
    n = rng.randint(20, 60)
    # "1, 2, 3": a number and a comma each, about 2 tokens a number: room for the whole count
    return {"category": "repetition", "prompt": f"Count from 1 to {n}, comma separated.", "max_tokens": 2 * n + 8}


def count_down(rng: random.Random) -> dict:
    n = rng.randint(15, 40)
    return {"category": "repetition", "prompt": f"Count down from {n} to 1, comma separated.", "max_tokens": 2 * n + 8}


def repeat_word(rng: random.Random) -> dict:
    return {"category": "repetition",
            "prompt": f"Repeat the word '{rng.choice(WORDS)}' {rng.randint(10, 30)} times, separated by spaces."}


def weekdays(rng: random.Random) -> dict:
    times = rng.randint(2, 5)
    return {"category": "repetition",
            "prompt": f"List the days of the week from Monday to Sunday, {times} times over, one per line."}


def multiples(rng: random.Random) -> dict:
    return {"category": "repetition",
            "prompt": f"List the first {rng.randint(10, 25)} multiples of {rng.randint(3, 13)}, comma separated."}


def math_rows(rng: random.Random) -> list[dict]:
    makers = (change_problem, distance_problem, apples_problem, rectangle_problem, recipe_problem, sum_problem)
    rows = []
    for i in range(ROWS_PER_CATEGORY):
        ask = "Solve step by step, then give the answer on its own line:\n\n" + makers[i % len(makers)](rng)
        if i % 4 == 3:
            rows.append({"category": "math", "turns": [ask, "Now check your answer by working backwards."]})
        else:
            rows.append({"category": "math", "prompt": ask})
    return rows


def change_problem(rng: random.Random) -> str:
    price, count = rng.randint(15, 95), rng.randint(3, 12)
    note = 10 * ((price * count) // 1000 + 1)
    return (f"A shop sells pencils for {price} cents each. {rng.choice(FIRST_NAMES)} buys {count} pencils and pays "
            f"with a {note}-dollar note. How much change is given, in cents?")


def distance_problem(rng: random.Random) -> str:
    return (f"A train travels at {rng.randint(40, 120)} km/h for {rng.randint(2, 5)} hours, then at "
            f"{rng.randint(40, 120)} km/h for {rng.randint(2, 4)} hours. How far does it travel in total?")


def apples_problem(rng: random.Random) -> str:
    name = rng.choice(FIRST_NAMES)
    a, b, c = rng.randint(12, 40), rng.randint(2, 11), rng.randint(3, 20)
    return f"{name} has {a} apples, gives {b} to a friend and buys {c} more. How many apples does {name} have now?"


def rectangle_problem(rng: random.Random) -> str:
    return (f"A rectangle is {rng.randint(3, 30)} cm wide and {rng.randint(31, 80)} cm long. "
            f"What are its area and its perimeter?")


def recipe_problem(rng: random.Random) -> str:
    servings = rng.randint(2, 6)
    return (f"A recipe needs {50 * rng.randint(3, 9)} grams of flour for {servings} servings. "
            f"How much flour is needed for {servings * rng.randint(2, 5)} servings?")


def sum_problem(rng: random.Random) -> str:
    a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(100, 999)
    return f"What is {a} times {b}, plus {c}?"


def take(rows: list[dict], category: str) -> list[dict]:
    """The first ROWS_PER_CATEGORY rows; fewer is a broken list above, said at once."""
    if len(rows) < ROWS_PER_CATEGORY:
        raise SystemExit(f"only {len(rows)} {category} rows from this Python's standard library; "
                         f"add candidates to the list")
    return rows[:ROWS_PER_CATEGORY]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
