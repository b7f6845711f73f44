"""``np.einsum`` subscripts that make a product of two operands, parsed into labels.

A product is what chunked arrays compute blockwise: each label at most once per operand, and a
label not in the output is in both operands (summed over); batch labels (in both operands and
the output) broadcast a length 1 as NumPy's einsum does.  Other subscripts (one or three
operands, ``...``, diagonals and traces, a sum over one operand's axis) raise ``TypeError``
naming what to use instead; subscripts NumPy rejects raise NumPy's ``ValueError``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["parse_einsum"]


def _unsupported(what: str, instead: str) -> TypeError:
    return TypeError(f"np.einsum on chunked arrays does not take {what}: {instead}")


def parse_einsum(
    subscripts: str, shapes: Sequence[tuple[int, ...]]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], dict[str, int]]:
    """The labels of each operand and of the output, and each label's length."""
    text = subscripts.replace(" ", "")
    if len(shapes) != 2:
        raise _unsupported(
            f"{len(shapes)} operand{'s' if len(shapes) != 1 else ''}",
            "it computes products of two; for one operand use x.transpose(...) or "
            "x.sum(axis=...), for more call it on two at a time",
        )
    if "." in text:
        raise _unsupported("'...'", "name every axis, or use np.matmul for stacks of matrices")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != 2:
        raise ValueError(
            f"einstein sum subscripts string {subscripts!r} names {len(terms)} operands, but "
            "2 operands were given"
        )
    for label in text.replace(",", "").replace("->", ""):
        if not label.isalpha() or not label.isascii():
            raise ValueError(
                f"invalid subscript {label!r} in einstein sum subscripts string, subscripts "
                "must be letters"
            )
    counts = Counter(terms[0] + terms[1])
    if not arrow:
        output = "".join(sorted(label for label, n in counts.items() if n == 1))
    sizes: dict[str, int] = {}
    for number, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        if len(term) != len(shape):
            raise ValueError(
                f"einstein sum subscripts string contains {len(term)} subscripts for operand "
                f"{number}, which has {len(shape)} dimensions"
            )
        if len(set(term)) != len(term):
            raise _unsupported(
                f"a label repeated in one operand ({term!r}: a diagonal or a trace)",
                "take np.diagonal or np.trace of a loaded part, or name the axes differently",
            )
        for label, n in zip(term, shape, strict=True):
            known = sizes.get(label, n)
            if known != n and 1 not in (known, n):
                raise ValueError(
                    "operands could not be broadcast together with remapped shapes "
                    f"[original->remapped]: {tuple(shapes[0])} and {tuple(shapes[1])} differ "
                    f"in the length of {label!r} ({known} and {n})"
                )
            sizes[label] = n if known == 1 else known  # a length 1 broadcasts, to 0 too
    for label in output:
        if label not in counts:
            raise ValueError(
                f"einstein sum subscripts string included output subscript {label!r} which "
                "never appeared in an input"
            )
    if len(set(output)) != len(output):
        raise ValueError(
            f"einstein sum subscripts string includes an output subscript more than once: "
            f"{output!r}"
        )
    alone = sorted(label for label, n in counts.items() if n == 1 and label not in output)
    if alone:
        raise _unsupported(
            f"a sum over an axis of one operand only ({', '.join(alone)})",
            "sum that axis first with x.sum(axis=...), then take the product",
        )
    return tuple(terms[0]), tuple(terms[1]), tuple(output), sizes
