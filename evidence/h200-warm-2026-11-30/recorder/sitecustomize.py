# Records every call of SGLang's load_jit (module args, sources, flags) and whether it compiled,
# one JSON line per call to $WARM_RECORD. Installed through an import hook so that modules that
# bind load_jit by name (from ... import load_jit) get the wrapper.
import importlib.abc, importlib.machinery, json, os, sys, time

_TARGET = "sglang.jit_kernel.utils.compile"
_OUT = os.environ.get("WARM_RECORD")


def _wrap(mod):
    real = mod.load_jit

    def load_jit(*args, **kwargs):
        t = time.time()
        before = set()
        cache = os.path.expanduser(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi"))
        if os.path.isdir(cache):
            before = set(os.listdir(cache))
        try:
            return real(*args, **kwargs)
        finally:
            after = set(os.listdir(cache)) if os.path.isdir(cache) else set()
            rec = {"args": list(args), "kwargs": {k: v for k, v in kwargs.items()},
                   "seconds": round(time.time() - t, 3), "new_dirs": sorted(after - before),
                   "pid": os.getpid()}
            try:
                with open(_OUT, "a") as fh:
                    fh.write(json.dumps(rec, default=str) + "\n")
            except Exception as e:
                sys.stderr.write(f"warm-recorder: {e}\n")
    mod.load_jit = load_jit


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _wrap(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if _OUT:
    sys.meta_path.insert(0, _Finder())
