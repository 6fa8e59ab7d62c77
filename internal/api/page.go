package api

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/sluice-scm/sluice/internal/problem"
	"github.com/sluice-scm/sluice/internal/store"
)

// pageJSON is Bitbucket's paged response.
type pageJSON[T any] struct {
	Size          int  `json:"size"`
	Limit         int  `json:"limit"`
	Start         int  `json:"start"`
	IsLastPage    bool `json:"isLastPage"`
	Values        []T  `json:"values"`
	NextPageStart *int `json:"nextPageStart,omitempty"`
}

// page parses start and limit. Limit 0 or absent is the default (25), and
// anything above 1000 is cut to 1000, as Bitbucket does; negative or
// non-numeric values are the caller's mistake.
func (c *call) page() (store.Page, error) {
	var pg store.Page
	for _, f := range []struct {
		name string
		dst  *int
	}{{"start", &pg.Start}, {"limit", &pg.Limit}} {
		v := c.query(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return pg, problem.New(problem.Invalid, "query parameter %s must be a non-negative integer", f.name)
		}
		*f.dst = n
	}
	limit, start := pg.Bounds()
	return store.Page{Start: start, Limit: limit}, nil
}

// probe is pg asking for one more row than the page holds, which tells
// whether a next page exists without a count query.
func probe(pg store.Page) store.Page { return store.Page{Start: pg.Start, Limit: pg.Limit + 1} }

// newPage builds a page from rows fetched with probe(pg): at most
// pg.Limit+1 rows, the extra one only signalling that more exist.
func newPage[T any](rows []T, pg store.Page) pageJSON[T] {
	last := len(rows) <= pg.Limit
	if !last {
		rows = rows[:pg.Limit]
	}
	if rows == nil {
		rows = []T{}
	}
	p := pageJSON[T]{Size: len(rows), Limit: pg.Limit, Start: pg.Start, IsLastPage: last, Values: rows}
	if !last {
		next := pg.Start + len(rows)
		p.NextPageStart = &next
	}
	return p
}

// slicePage pages an in-memory list (refs, tree entries, grants).
func slicePage[T any](all []T, pg store.Page) pageJSON[T] {
	if pg.Start >= len(all) {
		return newPage[T](nil, pg)
	}
	end := min(len(all), pg.Start+pg.Limit+1)
	return newPage(all[pg.Start:end], pg)
}

// mapPage converts a page's values.
func mapPage[T, U any](p pageJSON[T], f func(T) U) pageJSON[U] {
	out := pageJSON[U]{Size: p.Size, Limit: p.Limit, Start: p.Start, IsLastPage: p.IsLastPage,
		NextPageStart: p.NextPageStart, Values: make([]U, len(p.Values))}
	for i, v := range p.Values {
		out.Values[i] = f(v)
	}
	return out
}

// rawPage writes a page whose values are already JSON, byte for byte as
// encoding pageJSON would (the values compact, as encoding/json leaves
// them), followed by the fields extra writes (each starting with a comma)
// and the encoder's newline. It lets a handler serve values rendered once
// instead of encoding them on every request.
func rawPage(p pageJSON[[]byte], extra func(b *bytes.Buffer)) []byte {
	n := 128
	for _, v := range p.Values {
		n += len(v) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString(`{"size":`)
	b.WriteString(strconv.Itoa(p.Size))
	b.WriteString(`,"limit":`)
	b.WriteString(strconv.Itoa(p.Limit))
	b.WriteString(`,"start":`)
	b.WriteString(strconv.Itoa(p.Start))
	b.WriteString(`,"isLastPage":`)
	b.WriteString(strconv.FormatBool(p.IsLastPage))
	b.WriteString(`,"values":[`)
	for i, v := range p.Values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(v)
	}
	b.WriteByte(']')
	if p.NextPageStart != nil {
		b.WriteString(`,"nextPageStart":`)
		b.WriteString(strconv.Itoa(*p.NextPageStart))
	}
	if extra != nil {
		extra(&b)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// writeJSONString writes s as a JSON string, escaped as the API's encoder
// escapes it (HTML characters included).
func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}

// filterBatch is how many rows a filtered listing reads from the store at
// once: large enough that a caller who sees most rows needs one query per
// page, small enough to bound memory.
const filterBatch = 200

// filteredPage pages a store listing after dropping the rows keep rejects
// (what the caller may not see). Visible rows before pg.Start are skipped
// by counting, so paging stays stable for a caller whatever others see; the
// cost is reading the rows the caller skips, which bounded batches keep
// linear.
func filteredPage[T any](pg store.Page, fetch func(store.Page) ([]T, error), keep func(*T) (bool, error)) (pageJSON[T], error) {
	var out []T
	skipped := 0
	for offset := 0; ; offset += filterBatch {
		rows, err := fetch(store.Page{Start: offset, Limit: filterBatch})
		if err != nil {
			return pageJSON[T]{}, err
		}
		for i := range rows {
			ok, err := keep(&rows[i])
			if err != nil {
				return pageJSON[T]{}, err
			}
			if !ok {
				continue
			}
			if skipped < pg.Start {
				skipped++
				continue
			}
			out = append(out, rows[i])
			if len(out) > pg.Limit {
				return newPage(out, pg), nil
			}
		}
		if len(rows) < filterBatch {
			return newPage(out, pg), nil
		}
	}
}
