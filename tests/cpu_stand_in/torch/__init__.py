"""A stand-in torch that reports one NVIDIA H200 (what the probe's gpu-visible stage asks of torch)."""

__version__ = "2.11.0+cu130"


class version:  # torch.version.cuda
    cuda = "13.0"


class _Properties:
    uuid = "9f2a0c1e-0000-4000-8000-00000000c0de"


class _Tensor:
    def sum(self) -> float:
        return 1048576.0


def ones(*shape: object, **options: object) -> _Tensor:
    return _Tensor()


class cuda:  # torch.cuda
    @staticmethod
    def get_arch_list() -> list[str]:
        return ["sm_80", "sm_90", "sm_100"]

    @staticmethod
    def init() -> None:
        return None

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def get_device_capability(index: int) -> tuple[int, int]:
        return (9, 0)

    @staticmethod
    def get_device_name(index: int) -> str:
        return "NVIDIA H200"

    @staticmethod
    def get_device_properties(index: int) -> _Properties:
        return _Properties()

    @staticmethod
    def mem_get_info(index: int) -> tuple[int, int]:
        """(free, total) bytes, as on an idle H200: the gpu-visible stage reports what others hold."""
        return 139 * 2**30, 140 * 2**30
