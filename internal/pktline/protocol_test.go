package pktline

import (
	"strings"
	"testing"
)

func TestValidProtocol(t *testing.T) {
	tests := []struct {
		in      string
		valid   bool
		version int
	}{
		{"version=2", true, 2},
		{"version=1", true, 1},
		{"version=1:version=2", true, 2},
		{"version=2:object-format=sha256", true, 2},
		{"feature", true, 0},
		{"version=0", true, 0},
		{"", false, 0},
		{"version=", false, 0},
		{"Version=2", false, 0},
		{"version=2:", false, 0},
		{":version=2", false, 0},
		{"version=2 ", false, 0},
		{"version=2;x", false, 0},
		{"version=2\nx", false, 0},
		{"a=b=c", false, 0},
		{"version=" + strings.Repeat("2", 300), false, 0},
	}
	for _, tt := range tests {
		if got := ValidProtocol(tt.in); got != tt.valid {
			t.Errorf("ValidProtocol(%q) = %v, want %v", tt.in, got, tt.valid)
		}
		if got := ProtocolVersion(tt.in); got != tt.version {
			t.Errorf("ProtocolVersion(%q) = %d, want %d", tt.in, got, tt.version)
		}
	}
}
