package pull

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-scm/sluice/internal/store"
)

func TestOutcomeCacheEvictsOldest(t *testing.T) {
	var c outcomeCache
	for i := range outcomeCacheSize + 2 {
		c.put(fmt.Sprint(i), &mergeOutcome{})
	}
	if c.get("0") != nil || c.get("1") != nil {
		t.Error("the oldest entries were kept past the bound")
	}
	if c.get("2") == nil || c.get(fmt.Sprint(outcomeCacheSize+1)) == nil {
		t.Error("recent entries were evicted")
	}
	if len(c.items) != outcomeCacheSize || len(c.order) != outcomeCacheSize {
		t.Errorf("size %d/%d, want %d", len(c.items), len(c.order), outcomeCacheSize)
	}
}

func TestOutcomeFromRow(t *testing.T) {
	tests := []struct {
		status, conflicts string
		known             bool
		want              []string
	}{
		{"UNKNOWN", "", false, nil},
		{"CLEAN", "", true, nil},
		{"CONFLICTED", "a.txt\nb/c.go", true, []string{"a.txt", "b/c.go"}},
		{"CONFLICTED", "", true, []string{"(unknown)"}},
	}
	for _, tc := range tests {
		o := outcomeFromRow(&store.PullRequest{MergeStatus: tc.status, Conflicts: tc.conflicts})
		if (o != nil) != tc.known {
			t.Errorf("%s: known %v, want %v", tc.status, o != nil, tc.known)
			continue
		}
		if o == nil {
			continue
		}
		if !slices.Equal(o.conflicts, tc.want) || (len(tc.want) > 0) != (len(o.vetoes) == 1) {
			t.Errorf("%s %q: %+v", tc.status, tc.conflicts, o)
		}
	}
}

func TestMissingLines(t *testing.T) {
	oid := func(c byte) string { return string(slices.Repeat([]byte{c}, 40)) }
	tests := []struct {
		name   string
		chunks []string
		all    bool
		want   []string
	}{
		{"none missing", []string{oid('a') + "\n" + oid('b') + "\n"}, false, nil},
		{"split across writes", []string{oid('a') + "\n" + oid('b')[:10], oid('b')[10:] + " missing\n"}, false, []string{oid('b')}},
		{"no final newline", []string{oid('c') + " missing"}, false, []string{oid('c')}},
		{"every line when nothing was pushed", []string{oid('a') + "\n" + oid('b') + "\n"}, true, []string{oid('a'), oid('b')}},
		{"bounded", []string{oid('1') + " missing\n" + oid('2') + " missing\n" + oid('3') + " missing\n" + oid('4') + " missing\n"}, false,
			[]string{oid('1'), oid('2'), oid('3')}},
	}
	for _, tc := range tests {
		m := &missingLines{allMissing: tc.all}
		for _, c := range tc.chunks {
			if _, err := m.Write([]byte(c)); err != nil {
				t.Fatal(err)
			}
		}
		m.flush()
		if !slices.Equal(m.missing, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, m.missing, tc.want)
		}
	}
}
