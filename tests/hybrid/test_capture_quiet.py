"""A module that fails under capture is reported in one line: PyTorch's fake-tensor logger, which printed a
19-line traceback on stderr before it, is silent while capture traces (and restored after)."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

from hybrid.capture import capture  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402


def test_a_shape_error_is_one_line_with_nothing_logged(capfd) -> None:
    module = torch.nn.Sequential(torch.nn.Linear(8, 4))
    level = logging.getLogger("torch._subclasses.fake_tensor").level
    with pytest.raises(HybridError, match=r"^the module's forward failed under capture: RuntimeError: .*\[4, 7\]"):
        capture(module, (torch.randn(4, 7),), None, None, optimizer=None)
    err = capfd.readouterr().err
    assert "fake_tensor.py" not in err and "Traceback" not in err, err
    assert logging.getLogger("torch._subclasses.fake_tensor").level == level
