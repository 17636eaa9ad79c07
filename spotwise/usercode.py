"""The traceback of user code (a ``module:function`` workload, a ``module:Class`` policy), without
spotwise's own leading frames: what the CLI prints above the one-line exit-2 message."""

from __future__ import annotations

import traceback
from pathlib import Path

_SPOTWISE_DIR = str(Path(__file__).resolve().parent)
#: an explicit traceback limit: ``None`` would mean ``sys.tracebacklimit``, which other code may set
_ALL_FRAMES = 1 << 20


def user_traceback(exc: BaseException) -> str:
    """``exc``'s traceback without the leading frames that belong to spotwise itself."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_SPOTWISE_DIR):
        tb = tb.tb_next
    # every frame, whatever a library left in sys.tracebacklimit (SkyPilot sets it to 0 when it raises)
    return "".join(traceback.format_exception(type(exc), exc, tb, limit=_ALL_FRAMES))
