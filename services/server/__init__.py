"""The inference server: owns the live model, serves gRPC, and hot-swaps judged kernels into it."""
