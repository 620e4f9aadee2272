//! Tensors, the graph of ops, fusion passes, the memory plan, the executor and its backends.
