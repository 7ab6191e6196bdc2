from collections.abc import Callable
from typing import Any

def prove(value: Any, dump_float: Callable[[float], bytes], /) -> tuple[bytes, bytes] | None: ...
