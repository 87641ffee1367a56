package size

import (
	"fmt"
	"strconv"
	"strings"
)

// units are the suffixes Parse accepts, longest first.
var units = []struct {
	suffix string
	mult   uint64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// Max bounds any size Parse accepts (1 TiB).
const Max = 1 << 40

// Parse parses a positive byte count: "4096", "4096B", "4KiB" (4096),
// "4kB" (4000), "1MiB", "1MB" (1,000,000), "1GiB". Suffixes are
// case-insensitive.
func Parse(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	if strings.HasSuffix(t, "k") || strings.HasSuffix(t, "m") || strings.HasSuffix(t, "g") || strings.HasSuffix(t, "t") {
		return 0, fmt.Errorf("size %q: say KiB/MiB/GiB (powers of 2) or kB/MB/GB (powers of 10)", s)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(t), 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("size %q: want a positive whole number of bytes, optionally with B, KiB, MiB, GiB, kB, MB or GB", s)
	}
	if v > Max/mult {
		return 0, fmt.Errorf("size %q: over the limit of 1TiB", s)
	}
	return v * mult, nil
}

// Exact prints n exactly, in the largest binary unit that divides it:
// 4KiB, 1MiB, 1000B.
func Exact(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Human prints n rounded, for people: 1.50 MiB, 12 B.
func Human(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
