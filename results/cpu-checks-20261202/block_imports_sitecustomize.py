import sys
class _Block:
    """Stands for a machine without these packages: any import of them fails."""
    names = ("jedi", "parso")
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"blocked for the test: {name}")
        return None
sys.meta_path.insert(0, _Block())
