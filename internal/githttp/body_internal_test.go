package githttp

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluice-scm/sluice/internal/problem"
)

func TestCapReader(t *testing.T) {
	for _, n := range []int{0, 1, 99, 100, 101, 5000} {
		c := &capReader{r: iotest.HalfReader(strings.NewReader(strings.Repeat("x", n))), left: 100, limit: 100}
		got, err := io.ReadAll(c)
		if n <= 100 {
			if err != nil || len(got) != n {
				t.Errorf("%d bytes: got %d, %v", n, len(got), err)
			}
			continue
		}
		if !problem.Is(err, problem.TooLarge) || len(got) > 100 {
			t.Errorf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
	}
}
