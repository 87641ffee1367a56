package size

import "testing"

// "--size 1MB silently means 1 MiB": sizes mean what they say, or are
// refused.
func TestParse(t *testing.T) {
	for in, want := range map[string]uint64{
		"4096": 4096, "4096B": 4096, "4KiB": 4096, "4kib": 4096, "4kB": 4000, "4KB": 4000,
		"1MiB": 1 << 20, "1MB": 1000000, "1mb": 1000000, "1GiB": 1 << 30, "1GB": 1e9, " 2 MiB ": 2 << 20, "1TiB": 1 << 40,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1m", "1k", "1g", "1M", "1.5MiB", "MiB", "1 XB", "2TiB", "1e6", "0x10"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

func TestExactAndHuman(t *testing.T) {
	for n, want := range map[uint64]string{8: "8B", 4096: "4KiB", 1000: "1000B", 1 << 20: "1MiB", 3 << 30: "3GiB", 1536: "1536B", 1 << 40: "1024GiB"} {
		if got := Exact(n); got != want {
			t.Errorf("Exact(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[uint64]string{12: "12 B", 1536: "1.50 KiB", 3 << 20: "3.00 MiB", 5 << 30: "5.00 GiB"} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q, want %q", n, got, want)
		}
	}
}
