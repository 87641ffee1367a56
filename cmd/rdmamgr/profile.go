package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts the requested pprof profiles; the returned function
// stops them and writes the files.
func startProfiles(cpu, mem string) (func() error, error) {
	var cpuFile *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpuFile = f
	}
	if mem != "" {
		runtime.MemProfileRate = 4096
	}
	return func() error {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				return err
			}
		}
		if mem != "" {
			f, err := os.Create(mem)
			if err != nil {
				return err
			}
			defer f.Close()
			return pprof.Lookup("allocs").WriteTo(f, 0)
		}
		return nil
	}, nil
}
