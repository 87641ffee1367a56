package buffer

// Limits bound what the manager's registry holds (actor.Config.Limits).
// Zero fields mean no limit. A request over one fails with an error
// wrapping rdmamgr.ErrLimit (rdmamgr.ErrLimit) whose text names the
// serve flag that sets the cap.
type Limits struct {
	MaxBytes   uint64 // registered bytes in total (serve --max-registered)
	MaxRegions int    // number of regions (serve --max-regions)
	MaxRegion  uint64 // bytes of one region (serve --max-region)
}
