"""The cupy side: nanoGPT's GPT trained by explicit operations, each a forward/backward pair.

ops/ holds the NumPy form of every operation (reference and CPU fallback), gpu/ and kernels/ the CUDA
form; backend.py binds one of them; model.py, tape.py, optim.py and train.py are written once against
the backend's interface and run on either.
"""
