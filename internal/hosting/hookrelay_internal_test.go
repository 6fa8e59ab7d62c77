package hosting

import (
	"bytes"
	"strings"
	"testing"
)

// TestHookRelayFraming: hook messages go in as side-band progress before
// the final flush, whole packets stay whole however git's writes split
// them, git's other stderr is dropped, and a stream without side-band is
// left exactly as git wrote it.
func TestHookRelayFraming(t *testing.T) {
	pkt := func(s string) string { return hex4(len(s)+4) + s }
	report := pkt("unpack ok\n") + pkt("ng refs/heads/main failed\n") + "0000"
	cases := []struct {
		name, stream, want string
	}{
		{"side-band",
			pkt("\x01"+report) + "0000",
			pkt("\x01"+report) + pkt("\x02sluice: not recorded\n") + "0000"},
		{"no side-band",
			report,
			report},
		{"not pkt-lines",
			"garbage that is not framed",
			"garbage that is not framed"},
	}
	for _, c := range cases {
		for _, step := range []int{1, 3, 7, len(c.stream)} {
			var out bytes.Buffer
			h := newHookRelay(&out)
			stderr := h.Stderr()
			stderr.Write([]byte("error: cannot lock /srv/x\nsluice: not "))
			for s := c.stream; len(s) > 0; {
				n := min(step, len(s))
				if _, err := h.Write([]byte(s[:n])); err != nil {
					t.Fatal(err)
				}
				s = s[n:]
			}
			stderr.Write([]byte("recorded\n"))
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != c.want {
				t.Errorf("%s, writes of %d: got %q, want %q", c.name, step, got, c.want)
			}
			if strings.Contains(out.String(), "/srv/x") {
				t.Errorf("%s: git's stderr relayed", c.name)
			}
		}
	}
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}
