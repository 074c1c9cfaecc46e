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


class _Spectral(torch.nn.Module):
    def forward(self, x):  # noqa: ANN001, ANN201
        return torch.fft.irfft(torch.fft.rfft(x, dim=-1), n=x.shape[-1], dim=-1)   # no bfloat16 kernel


def test_a_failure_in_the_users_code_names_its_line() -> None:
    """"Unsupported dtype BFloat16" alone said neither which call nor where (helper-129: an rfft under --dtype bf16);
    the user's last line on the stack is named, as for a value read."""
    import inspect

    line = inspect.getsourcelines(_Spectral.forward)[1] + 1
    with pytest.raises(HybridError) as info:
        capture(_Spectral(), (torch.randn(4, 8),), None, None, optimizer=None, dtype="bf16")
    msg = str(info.value)
    assert msg.startswith("the module's forward failed under capture: RuntimeError:"), msg
    assert msg.endswith(f"test_capture_quiet.py:{line}") and ", called at " in msg, msg
