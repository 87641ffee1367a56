// Package defaults fills a configuration's zero fields. Every package of
// the module keeps its defaults in one place, its DefaultConfig, and its
// withDefaults fills the zero fields of a Config from it with Set.
package defaults

// Set sets *p to d when *p is its type's zero value.
func Set[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}
