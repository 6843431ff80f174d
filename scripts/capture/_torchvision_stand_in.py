import importlib.machinery, sys, types


def _torchvision_stand_in() -> None:
    """torchvision's CPU build is not installable from this machine (its PyPI build needs CUDA torch).
    sglang imports it at module level only for multimodal image transforms, which a capture never
    runs: transformers is told first that there is no torchvision (its answer is cached), then a
    stand-in module satisfies those imports. Named in the fixture README."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:
        pass
    from transformers.utils import import_utils
    import_utils.is_torchvision_available()

    def _any(n):
        if n.startswith("__"):
            raise AttributeError(n)
        return type(n, (), {"__init__": lambda self, *a, **k: None, "__getattr__": lambda self, k: 0})

    for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
                 "torchvision.transforms.v2", "torchvision.io", "torchvision.ops"):
        m = types.ModuleType(name)
        m.__getattr__ = _any
        m.__path__ = []
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = m


_torchvision_stand_in()
