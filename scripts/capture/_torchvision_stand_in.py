import importlib.machinery, sys, types

STAND_IN_VERSION = "0.28.0"


def _torchvision_stand_in() -> None:
    """torchvision's CPU build is not installable from this machine (its PyPI build needs CUDA torch).
    sglang imports it at module level only for multimodal image transforms, which a capture never
    runs, so stand-in modules satisfy those imports. What transformers is told depends on its
    version (named in the fixture READMEs):
    - transformers 5.19 (sglang 0.5.23's pin) imports fine when told there is NO torchvision;
    - transformers 5.12 (sglang 0.5.17's pin) guards `AutoImageProcessor.register`, which sglang's
      configs call at import, behind torchvision, so there it is told torchvision is present."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:
        pass
    import transformers
    from transformers.utils import import_utils
    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    if major_minor < (5, 19):
        orig = import_utils._is_package_available

        def _available(name, *a, **k):
            if name == "torchvision":
                return True, STAND_IN_VERSION      # (exists, version), whatever was asked
            return orig(name, *a, **k)

        import_utils._is_package_available = _available
        import_utils.is_torchvision_available.cache_clear()
    import_utils.is_torchvision_available()

    class _Anything(type):   # class attributes too (InterpolationMode.NEAREST_EXACT)
        def __getattr__(cls, k):
            if k.startswith("__"):
                raise AttributeError(k)
            return 0

    def _any(n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _Anything(n, (), {"__init__": lambda self, *a, **k: None, "__getattr__": lambda self, k: 0})

    for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
                 "torchvision.transforms.v2", "torchvision.transforms.v2.functional", "torchvision.io",
                 "torchvision.ops"):
        m = types.ModuleType(name)
        m.__getattr__ = _any
        m.__path__ = []
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        m.__version__ = STAND_IN_VERSION
        sys.modules[name] = m
        parent, _, leaf = name.rpartition(".")
        if parent:   # `import torchvision.transforms.v2.functional as F` reads it off the parent
            setattr(sys.modules[parent], leaf, m)


_torchvision_stand_in()
