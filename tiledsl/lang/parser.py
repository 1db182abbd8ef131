"""Source text -> `Kernel` AST. Syntax only: every semantic rule lives in checker.py.

The lark grammar (grammar.lark) is LALR with a contextual lexer; the parser object is built once per
process. A lark `Transformer` turns the parse tree into the dataclasses of ast.py, and lark's
exceptions become `SourceError`s whose message names the expected tokens in words.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from pathlib import Path

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from tiledsl.errors import SourceError, SourceLocation
from tiledsl.lang import MAX_DEPTH, ast, make_recursion_room

_GRAMMAR_PATH = Path(__file__).with_name("grammar.lark")
# The basic (not contextual) lexer makes every keyword reserved everywhere: with the contextual one,
# `let let = 1;` would parse because only NAME is acceptable after `let`.
_LARK = Lark(_GRAMMAR_PATH.read_text(), parser="lalr", lexer="basic", propagate_positions=True,
             maybe_placeholders=True)

# Readable names for the regex terminals; string terminals are shown as their quoted text.
_REGEX_TERMINAL_NAMES = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number", "$END": "end of file"}
_STRING_TERMINALS = {t.name: t.pattern.value for t in _LARK.terminals if t.pattern.type == "str"}
_KEYWORDS = {v for v in _STRING_TERMINALS.values() if v.isidentifier()}

# Groups of terminals summarised as one phrase so messages stay short.
_EXPR_START = {"NAME", "INT", "FLOAT", "TRUE", "FALSE", "NONE", "_LPAR", "_LSQB", "MINUS", "NOT"}
_STMT_START = {"LET", "FOR", "IF"}
_OPERATORS = {"OR", "AND", "LT", "LE", "GT", "GE", "EQEQ", "NE", "PIPE", "CARET", "AMP", "LSHIFT",
              "RSHIFT", "PLUS", "MINUS", "STAR", "SLASH", "DSLASH", "PERCENT", "_LSQB"}


def _int(tok: Token | str) -> int:
    """An integer literal: decimal, or 0x / 0o / 0b (as -D values are written)."""
    return int(str(tok), 0) if str(tok)[:2].lower() in ("0x", "0o", "0b") else int(str(tok))


def parse(source: str, filename: str) -> ast.Kernel:
    """Parse one .tile file; it must define exactly one kernel.

    The result is shared by every call with the same text and file name (parsing a library kernel
    took a sixth of a compile, and a process compiles many variants of one source): treat it as
    read-only. `checker.bind`, which rewrites it, works on a copy."""
    return _parse_cached(source, filename)


def forget_parses() -> None:
    """Drop the parses `parse` keeps (benchmarks/compile_time.py's cold compiles parse)."""
    _parse_cached.cache_clear()


@functools.lru_cache(maxsize=64)
def _parse_cached(source: str, filename: str) -> ast.Kernel:
    try:
        tree = _LARK.parse(source)
    except UnexpectedInput as e:
        raise _syntax_error(e, source, filename) from None
    _check_depth(tree, source, filename)
    make_recursion_room()
    kernels = _ToAst(filename, source).transform(tree)
    if not kernels:
        raise SourceError("no kernel found: a .tile file defines one `kernel NAME(...) grid(...) { ... }`",
                          SourceLocation(filename, 1, 1), source)
    if len(kernels) > 1:
        raise SourceError(f"only one kernel per file, but '{kernels[1].name}' follows "
                          f"'{kernels[0].name}'", kernels[1].loc, source,
                          hint="put each kernel in its own .tile file")
    return kernels[0]


def _check_depth(tree: Tree, source: str, filename: str) -> None:
    """Refuse a program nested deeper than MAX_DEPTH (a 2,000-term sum, 1,000 unary minuses, 600
    nested ifs) with a located error, walking the tree without recursion."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            meta = node.meta if isinstance(node, Tree) else node
            loc = SourceLocation(filename, getattr(meta, "line", 1) or 1, getattr(meta, "column", 1) or 1)
            raise SourceError(f"this program nests expressions and blocks more than {MAX_DEPTH} levels deep here",
                              loc, source, hint="split long chains of operators or nested blocks with `let` "
                                                "temporaries")
        if isinstance(node, Tree):
            stack.extend((child, depth + 1) for child in node.children if isinstance(child, Tree | Token))


# ---------------------------------------------------------------------------------------------
# Syntax errors.

def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    if tok.type == "NAME":
        return f"name '{tok}'"
    if tok.type in ("INT", "FLOAT"):
        return f"number '{tok}'"
    return f"'{tok}'"


def _describe_expected(expected: set[str]) -> str:
    exp = set(expected)
    phrases = []
    if _STMT_START <= exp and {"NAME", "INT"} <= exp:
        phrases.append("a statement")
        exp -= _STMT_START | _EXPR_START
    elif {"NAME", "INT", "FLOAT"} <= exp:
        phrases.append("an expression")
        exp -= _EXPR_START
    if len(exp & _OPERATORS) >= 3:
        exp -= _OPERATORS
        operator = True
    else:
        operator = False
    words = [f"'{_STRING_TERMINALS[n]}'" if n in _STRING_TERMINALS else _REGEX_TERMINAL_NAMES.get(n, n)
             for n in sorted(exp)]
    phrases += sorted(words)
    if operator:
        phrases.append("an operator")
    if not phrases:
        return "something else"
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " or " + phrases[-1]


def _end_of_previous_token(source: str, pos: int) -> int:
    """Offset just past the last token before `pos`, skipping blanks and `#` comments (the language
    has no string literals, so every `#` starts a comment)."""
    while pos > 0:
        line_start = source.rfind("\n", 0, pos) + 1
        hash_at = source.find("#", line_start, pos)
        if hash_at != -1:  # `pos` is inside (or just after) a comment: continue from its start
            pos = hash_at
        if pos > line_start and not source[pos - 1].isspace():
            return pos
        if pos > line_start:
            pos -= 1
        else:
            pos = line_start - 1 if line_start > 0 else 0
    return 0


def _loc_of_offset(source: str, filename: str, pos: int) -> SourceLocation:
    line = source.count("\n", 0, pos) + 1
    col = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return SourceLocation(filename, line, col)


def _syntax_error(e: UnexpectedInput, source: str, filename: str) -> SourceError:
    if isinstance(e, UnexpectedCharacters):
        ch = source[e.pos_in_stream] if e.pos_in_stream < len(source) else "?"
        shown = f"'{ch}'" if ch.isprintable() and not ch.isspace() else \
            f"{ascii(ch)} ({unicodedata.name(ch, 'a control character')})"
        return SourceError(f"unexpected character {shown}", SourceLocation(filename, e.line, e.column), source)
    if not isinstance(e, UnexpectedToken):  # e.g. UnexpectedEOF; LALR reports $END tokens instead
        return SourceError("syntax error", SourceLocation(filename, max(e.line, 1), max(e.column, 1)),
                           source)
    tok = e.token
    # LALR merges states, so `e.expected` may list tokens that would fail a few reductions later
    # (e.g. ';' inside `f(1 2)`); the interactive parser tries each terminal for the exact set.
    expected = set(e.interactive_parser.accepts()) if e.interactive_parser is not None else set(e.expected)
    if tok.type == "$END":
        loc = _loc_of_offset(source, filename, _end_of_previous_token(source, len(source)))
    else:
        loc = SourceLocation(filename, tok.line, tok.column)
    if "_SEMI" in expected and tok.type in ("LT", "LE", "GT", "GE", "EQEQ", "NE"):
        return SourceError(f"comparisons cannot be chained: unexpected '{tok}'", loc, source,
                           hint="combine them with `&`, e.g. (a < b) & (b < c)")
    if "_SEMI" in expected:
        # The statement's expression is complete; point just after it, where the ';' belongs.
        start = tok.start_pos if tok.type != "$END" else len(source)
        at = _loc_of_offset(source, filename, _end_of_previous_token(source, start))
        return SourceError("expected ';' after statement", at, source,
                           hint=f"found {_describe_token(tok)} instead")
    if expected == {"NAME", "_RPAR"} and tok.type in _EXPR_START:
        return SourceError("positional argument after a keyword argument", loc, source,
                           hint="pass positional arguments first, e.g. load(x[i], mask=m)")
    hint = None
    if tok.type != "NAME" and str(tok) in _KEYWORDS and "NAME" in expected and "INT" not in expected:
        hint = f"'{tok}' is a reserved word and cannot be used as a name"
    return SourceError(f"unexpected {_describe_token(tok)}; expected {_describe_expected(expected)}",
                       loc, source, hint=hint)


# ---------------------------------------------------------------------------------------------
# Parse tree -> AST. Only builds nodes; no checks.

@v_args(meta=True)
class _ToAst(Transformer):
    def __init__(self, filename: str, source: str):
        super().__init__()
        self.filename = filename
        self.source = source

    def _loc(self, meta_or_tok) -> SourceLocation:
        return SourceLocation(self.filename, meta_or_tok.line, meta_or_tok.column)

    # ---- header --------------------------------------------------------------------------
    def start(self, meta, kernels):
        return list(kernels)

    def kernel(self, meta, c):
        kw, name, constexprs, args, grid, waves, occupancy, requires, body = c
        return ast.Kernel(name=str(name), constexprs=constexprs or [], args=args, grid=grid,
                          waves=waves, occupancy=occupancy, body=body, loc=self._loc(kw), source=self.source,
                          file=self.filename, requires=requires or [])

    def constexpr_list(self, meta, params):
        return list(params)

    def cparam_plain(self, meta, c):
        name, _colon, kind, default = c
        return ast.ConstexprParam(str(name), str(kind), default, loc=self._loc(name))

    def cparam_enum(self, meta, c):
        name, _colon, _enum, choices, default = c
        return ast.ConstexprParam(str(name), "enum", None if default is None else str(default),
                                  choices=tuple(choices), loc=self._loc(name))

    def name_list(self, meta, names):
        return [str(n) for n in names]

    def cdefault(self, meta, c):
        tok = c[-1]
        if tok.type == "INT":
            return -_int(tok) if len(c) == 2 else _int(tok)
        if tok.type in ("TRUE", "FALSE"):
            return tok.type == "TRUE"
        return str(tok)

    def arg_list(self, meta, args):
        return list(args)

    def tensor_arg(self, meta, c):
        name, _colon, _tensor, dtype, dims = c
        dt = str(dtype)
        # Aliases are canonicalised here; any other name is a dtype constexpr, resolved by bind().
        return ast.Arg(str(name), ast.TensorType(ast.DTYPE_ALIASES.get(dt, dt), tuple(dims)),
                       self._loc(name))

    def scalar_arg(self, meta, c):
        name, _colon, ty = c
        return ast.Arg(str(name), ast.ScalarType(ast.DTYPE_ALIASES.get(str(ty), str(ty))), self._loc(name))

    def dim_list(self, meta, dims):
        return [_int(d) if d.type == "INT" else str(d) for d in dims]

    def grid(self, meta, c):
        return list(c[1:])

    def waves(self, meta, c):
        return c[1]

    def occupancy(self, meta, c):
        return c[1]

    def requires(self, meta, c):
        return list(c[1:])

    # ---- statements ----------------------------------------------------------------------
    def block(self, meta, stmts):
        return list(stmts)

    def let_stmt(self, meta, c):
        kw, name, value = c
        return ast.Let(self._loc(kw), str(name), value)

    def assign_stmt(self, meta, c):
        name, value = c
        return ast.Assign(self._loc(name), str(name), value)

    def expr_stmt(self, meta, c):
        return ast.ExprStmt(self._loc(meta), c[0])

    def for_stmt(self, meta, c):
        kw, var, _in, _range, start, end, step, stages, body = c
        count, option = stages if stages is not None else (None, None)
        return ast.For(self._loc(kw), str(var), start, end, step, count, body, option)

    def stages(self, meta, c):
        return c[1], c[2]  # the count, and its keyword (reuse=...) or None

    def if_stmt(self, meta, c):
        kw, cond, then_body, else_part = c
        if else_part is None:
            else_body = []
        elif isinstance(else_part, ast.If):  # `else if`
            else_body = [else_part]
        else:
            else_body = else_part
        return ast.If(self._loc(kw), cond, then_body, else_body)

    # ---- expressions ---------------------------------------------------------------------
    def binop(self, meta, c):
        lhs, op, rhs = c
        return ast.BinOp(self._loc(meta), str(op), lhs, rhs)

    def unop(self, meta, c):
        op, operand = c
        return ast.UnaryOp(self._loc(op), str(op), operand)

    def index(self, meta, c):
        base, indices = c
        return ast.Index(self._loc(meta), base, indices)

    def index_list(self, meta, items):
        return list(items)

    def slice(self, meta, c):
        return ast.Slice(self._loc(c[0]))

    def int_lit(self, meta, c):
        return ast.Const(self._loc(c[0]), _int(c[0]))

    def float_lit(self, meta, c):
        return ast.Const(self._loc(c[0]), float(c[0]))

    def true_lit(self, meta, c):
        return ast.Const(self._loc(c[0]), True)

    def false_lit(self, meta, c):
        return ast.Const(self._loc(c[0]), False)

    def none_lit(self, meta, c):
        return ast.NoneLit(self._loc(c[0]))

    def name(self, meta, c):
        tok = c[0]
        loc, text = self._loc(tok), str(tok)
        if text in ast.DTYPE_ALIASES:
            return ast.DTypeLit(loc, ast.DTYPE_ALIASES[text])
        if text in ("inf", "nan"):
            return ast.Const(loc, math.inf if text == "inf" else math.nan)
        return ast.Name(loc, text)

    def call(self, meta, c):
        func, args = c
        positional = [a for a in args or [] if not isinstance(a, ast.Keyword)]
        keywords = [a for a in args or [] if isinstance(a, ast.Keyword)]
        return ast.Call(self._loc(func), str(func), positional, keywords)

    def call_args(self, meta, items):
        return list(items)

    def kwarg(self, meta, c):
        name, value = c
        return ast.Keyword(str(name), value, self._loc(name))

    def list_expr(self, meta, items):
        return ast.ListExpr(self._loc(meta), list(items))
