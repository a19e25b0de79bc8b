# services/router/_prompt.c: policy.Prompt's block hashes in one C call (built where a compiler is found)
from typing import Any, Literal, overload

import msgspec

@overload
def blocks(
    body: dict[str, Any], block_chars: int, max_blocks: int, as_raw: Literal[False]
) -> tuple[tuple[int, ...], int | None] | None: ...
@overload
def blocks(body: dict[str, Any], block_chars: int, max_blocks: int, as_raw: Literal[True]) -> msgspec.Raw | None: ...
