"""Demo MCP server: arithmetic, safe expression evaluation, and a slow counter with progress.

Run: ``python -m mcpvisor.demo.calc`` (stdio).

Tools:
* ``add(a, b)``, ``multiply(a, b)`` - plain arithmetic.
* ``evaluate(expression)`` - arithmetic expressions such as ``2 * (3 + 4) ** 2 / sqrt(16)``,
  parsed with :mod:`ast` and evaluated by walking the tree (never ``eval``): numbers,
  ``+ - * / // % **``, parentheses, the constants ``pi``/``e``/``tau`` and the functions
  ``abs round min max sqrt exp log log10 sin cos tan floor ceil``.
* ``count_slowly(n, delay_ms=100)`` - counts to ``n``, one step every ``delay_ms``,
  reporting progress after each step; cancellable at any step.

Every tool is read-only (``readOnlyHint``) and touches nothing outside the process.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

MAX_EXPRESSION_LENGTH = 1_000
MAX_EXPONENT = 10_000
MAX_MAGNITUDE = 1e300
MAX_COUNT = 10_000
MAX_DELAY_MS = 60_000

PURE = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)

mcp = MCPServer(
    "calc",
    version="1.0.0",
    instructions="Arithmetic tools. Use `evaluate` for whole expressions; `count_slowly` shows progress.",
)

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}


class EvaluationError(ValueError):
    """The expression is not safe arithmetic, or cannot be computed."""


def _check_magnitude(value: object) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EvaluationError("result is not a real number")
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise EvaluationError("result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise EvaluationError("result is too large")
    return value


def _eval_node(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise EvaluationError(f"unsupported literal {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise EvaluationError(f"unknown name {node.id!r}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _eval_node(node.left)
        right = _eval_node(node.right)
        if isinstance(node.op, ast.Pow) and (
            abs(right) > MAX_EXPONENT or (abs(left) > 1 and abs(right) > 1_000)
        ):
            raise EvaluationError("exponent is too large")
        try:
            return _check_magnitude(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise EvaluationError("division by zero") from None
        except OverflowError:
            raise EvaluationError("result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            raise EvaluationError(f"unknown function {node.func.id!r}")
        args = [_eval_node(arg) for arg in node.args]
        try:
            return _check_magnitude(function(*args))
        except (TypeError, ValueError, OverflowError) as exc:
            raise EvaluationError(f"{node.func.id}: {exc}") from None
    raise EvaluationError(f"unsupported syntax: {type(node).__name__}")


def safe_evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression without ``eval``; raises `EvaluationError`."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise EvaluationError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise EvaluationError(f"not an expression: {exc.msg}") from None
    return _eval_node(tree)


@mcp.tool(annotations=PURE)
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@mcp.tool(annotations=PURE)
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@mcp.tool(annotations=PURE)
def evaluate(expression: str) -> float:
    """Evaluate an arithmetic expression, e.g. `2 * (3 + 4) ** 2 / sqrt(16)`.

    Supports numbers, + - * / // % **, parentheses, pi, e, tau and the functions
    abs, round, min, max, sqrt, exp, log, log10, sin, cos, tan, floor, ceil.
    """
    try:
        return safe_evaluate(expression)
    except EvaluationError as exc:
        raise ToolError(f"{exc} (in {expression!r})") from None


@mcp.tool(annotations=READ_ONLY)
async def count_slowly(n: int, ctx: Context, delay_ms: int = 100) -> str:
    """Count from 1 to n, waiting delay_ms between steps and reporting progress after each one."""
    if not 0 <= n <= MAX_COUNT:
        raise ToolError(f"n must be between 0 and {MAX_COUNT}")
    if not 0 <= delay_ms <= MAX_DELAY_MS:
        raise ToolError(f"delay_ms must be between 0 and {MAX_DELAY_MS}")
    for step in range(1, n + 1):
        await anyio.sleep(delay_ms / 1000)
        await ctx.report_progress(step, n, f"counted {step} of {n}")
    return f"counted to {n}"


def main() -> None:
    mcp.run()


if __name__ == "__main__":
    main()
