package ibverbs

// Config selects the RDMA device and port of the backend.
type Config struct {
	Device   string // device name, e.g. "mlx5_0"; empty picks the first active one
	Port     int    // port number (1-based); 0 picks the first active port
	GIDIndex int    // GID table index used for RoCE addressing
}

// DeviceInfo describes one RDMA device port.
type DeviceInfo struct {
	Name  string
	Port  int
	State string
	GIDs  []string
}
