package queuepair

// RaceEnabled tells the external tests whether -race is on.
const RaceEnabled = raceEnabled

// SetStageChunk makes the staging buffers of queue pairs whose first
// staged operation comes later n bytes; restore undoes it.
func SetStageChunk(n uint64) (restore func()) {
	old := stageChunk
	stageChunk = n
	return func() { stageChunk = old }
}
