"""What the tests and the benchmarks both stand on, and the product never imports: the Kubernetes API
emulator (`kubeemu`), a real control plane and node built from Go modules (`cluster/`), one API for either
(`kubeapi`), Jetway's services in cluster mode against it (`controller`), and waiting on a condition (`waiting`)."""
