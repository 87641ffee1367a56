package main

import "github.com/rdmamgr/rdmamgr/internal/size"

// The command line's sizes (internal/size): --size 1MiB, --max-registered
// 64GiB; parseSize refuses the ambiguous 1M.

func parseSize(s string) (uint64, error) { return size.Parse(s) }

func fmtSize(n uint64) string { return size.Exact(n) }

func fmtBytes(n uint64) string { return size.Human(n) }
