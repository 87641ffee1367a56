package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmamgr/rdmamgr/certs"
)

func TestNormalizeListen(t *testing.T) {
	for in, want := range map[string]string{
		":8090":          ":8090",
		"0.0.0.0:8090":   "0.0.0.0:8090",
		"[::]:8090":      "[::]:8090",
		"10.0.0.1:0":     "10.0.0.1:0",
		"localhost:8090": "localhost:8090",
	} {
		got, err := normalizeListen(in)
		if err != nil || got != want {
			t.Errorf("normalizeListen(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"8090", "::8090", ""} {
		if _, err := normalizeListen(bad); err == nil {
			t.Errorf("normalizeListen(%q) accepted", bad)
		}
	}
}

func TestMakeCerts(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := makeCerts(dir, []string{"a=10.0.0.1", "b"}, &out); err != nil {
		t.Fatal(err)
	}
	ca1, err := os.ReadFile(filepath.Join(dir, certs.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Load(filepath.Join(dir, certs.CACertFile), filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key")); err != nil {
		t.Fatal(err)
	}
	// A second run issues with the same CA.
	if err := makeCerts(dir, []string{"c=10.0.0.3"}, &out); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, certs.CACertFile))
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("second run replaced the CA")
	}
	if err := makeCerts(dir, []string{"../x"}, &out); err == nil {
		t.Fatal("a name with a path was accepted")
	}
	if st, err := os.Stat(filepath.Join(dir, "a.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode: %v %v", st.Mode(), err)
	}
}
