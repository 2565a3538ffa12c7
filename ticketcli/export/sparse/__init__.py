"""The sparse runtime form of a ticket's network (`ticket export --format sparse`, `tc.load_sparse`): `layers` (a
Linear and a Conv2d lowered to a matmul, computing with a CSR weight), `measure` (each layer timed sparse against
dense, and the decision as a typed record), `net` (SparseNet and `sparse_module`, which makes it from a network and
its masks), `file` (the export file: written, and read back as hostile input, every tensor checked before use),
`seeded` (a ticket's network regenerated from its seed one layer at a time, straight into the sparse form),
`skeleton` (the network on the meta device, its position embeddings whole, and the layers a GPT reads as a table),
`load` (`load_sparse`: an export or a ticket to a SparseNet), `structured` (the BSR and compressed 2:4 layouts and
the layers computing with them) and `layouts` (`--layout`: which layout a ticket's masks allow, and each structured
layer made at export and at load, falling back to CSR or dense where its kernel does not run).

A workflow package, like the rest of export/: imports the core (models, the ticket file, runs' rebuilding), never
reporting, settings or the command line."""
