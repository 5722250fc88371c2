"""Is there an NVIDIA driver on this machine? Asked before a GPU experiment starts anything."""

from __future__ import annotations


def nvidia_driver_status() -> tuple[bool, str]:
    """(present, reason) from NVML itself: `import pynvml` comes from nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return False, "the nvidia-ml-py package is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return False, f"NVML: {exc}"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if count == 0:
        return False, "NVML sees no GPU"
    return True, f"{count} GPU(s)"
