// Package size parses and prints byte counts the way rdmamgr's command
// line and benchmark reports spell them: IEC binary units (KiB, MiB, GiB,
// TiB) and SI decimal units (kB, MB, GB, TB) with their true meanings. A
// bare K, M or G is refused: it is ambiguous.
package size
