"""The torch side: nanoGPT's GPT (model.py) trained as nanoGPT's train.py does (train.py)."""
