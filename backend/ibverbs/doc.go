// Package ibverbs is the RDMA data-plane backend over libibverbs.
//
// The real backend uses cgo and libibverbs (rdma-core): it registers regions
// as ibverbs memory regions, sets up RC queue pairs through the managers'
// route handshake and posts RDMA WRITE (Put) and RDMA READ (Get) work
// requests. It is compiled only with the build tag `ibverbs`:
//
//	go build -tags ibverbs ./...
//
// Without the tag this package is a stub: New and Devices return an error
// that wraps backend.ErrNotSupported ("not built with ibverbs support"), so
// callers can fall back to another backend with
// errors.Is(err, backend.ErrNotSupported).
package ibverbs
