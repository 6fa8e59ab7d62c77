package problem

import "testing"

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{
		64 << 10: "64KiB", 10 << 20: "10MiB", 2 << 30: "2GiB", 3 << 40: "3TiB",
		1536: "1536 bytes", 0: "0 bytes", 1<<20 + 1: "1048577 bytes",
	} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
