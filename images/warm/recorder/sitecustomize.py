# Records, one JSON line per call to $WARM_RECORD, what a server start asks to be compiled:
#  - every call of SGLang's load_jit (module args, sources, flags), as the first recorder did;
#  - every outermost call of a FlashInfer module generator (flashinfer.jit...gen_*_module), with its
#    arguments (torch dtypes as {"torch.dtype": name}) and the JitSpec name it returned, so that the
#    bake can call the same generator for another arch.
# Installed through an import hook, so that modules which bind these functions by name get the wrapper.
import functools, importlib.abc, importlib.machinery, json, os, sys, threading, time

_OUT = os.environ.get("WARM_RECORD")
_depth = threading.local()


def _write(rec):
    rec["pid"] = os.getpid()
    try:
        with open(_OUT, "a") as fh:
            fh.write(json.dumps(rec, default=_encode) + "\n")
    except Exception as e:
        sys.stderr.write(f"warm-recorder: {e}\n")


def _encode(value):
    name = type(value).__module__ + "." + type(value).__name__
    if name == "torch.dtype":
        return {"torch.dtype": str(value).split(".", 1)[1]}
    return {"unencoded": repr(value)}


def _wrap_load_jit(mod):
    real = mod.load_jit

    def load_jit(*args, **kwargs):
        t = time.time()
        cache = os.path.expanduser(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi"))
        before = set(os.listdir(cache)) if os.path.isdir(cache) else set()
        try:
            return real(*args, **kwargs)
        finally:
            after = set(os.listdir(cache)) if os.path.isdir(cache) else set()
            _write({"kind": "sglang_jit", "args": list(args), "kwargs": dict(kwargs),
                    "seconds": round(time.time() - t, 3), "new_dirs": sorted(after - before)})
    mod.load_jit = load_jit


def _wrap_generators(mod):
    for attr, func in list(vars(mod).items()):
        if not (attr.startswith("gen_") and attr.endswith("_module") and callable(func)):
            continue
        if getattr(func, "__module__", None) != mod.__name__ or hasattr(func, "_warm_recorded"):
            continue
        ref = f"{mod.__name__}:{attr}"

        def make(func=func, ref=ref):
            @functools.wraps(func)
            def generator(*args, **kwargs):
                depth = getattr(_depth, "n", 0)
                _depth.n = depth + 1
                try:
                    spec = func(*args, **kwargs)
                finally:
                    _depth.n = depth
                if depth == 0:
                    _write({"kind": "flashinfer", "ref": ref, "args": list(args), "kwargs": dict(kwargs),
                            "spec": getattr(spec, "name", None)})
                return spec
            generator._warm_recorded = True
            return generator
        setattr(mod, attr, make())


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, after):
        self.inner, self.after = inner, after

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.after(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "sglang.jit_kernel.utils.compile":
            after = _wrap_load_jit
        elif name.startswith("flashinfer.jit"):
            after = _wrap_generators
        else:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, after)
        return spec


if _OUT:
    sys.meta_path.insert(0, _Finder())
