package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-scm/sluice/internal/auth"
	"github.com/sluice-scm/sluice/internal/entity"
	"github.com/sluice-scm/sluice/internal/problem"
)

// Avatars: Sluice stores no uploaded images, so every project and user
// gets a generated default, Bitbucket's /avatar.png paths. The picture is
// a 5×5 mirrored pattern and a colour taken from the SHA-256 of the
// project key or user slug: the same name always draws the same picture,
// on every node, with nothing stored. Pictures are kept in a small
// in-process cache (they cost a PNG encoding each) and sent with an ETag
// and a private max-age, so browsers revalidate at most hourly and shared
// caches never keep a private project's picture.
//
// Who may see a picture is who may see its owner: a project the caller
// cannot read is 404 like any other, a user's picture needs a signed-in
// caller like GET /users/{slug}.

func (s *server) avatarRoutes() []route {
	size := q("s", "size in pixels, 16 to 256 (default 64)")
	return []route{
		{Method: "GET", Pattern: project + "/avatar.png", Summary: "A project's avatar (a generated PNG)",
			Query: []param{size}, handle: (*call).projectAvatar},
		{Method: "GET", Pattern: apiBase + "/users/{userSlug}/avatar.png", Summary: "A user's avatar (a generated PNG)",
			Query: []param{size}, handle: (*call).userAvatar},
	}
}

const (
	avatarGrid        = 5
	avatarDefaultSize = 64
	avatarMinSize     = 16
	avatarMaxSize     = 256
	// avatarCacheMax bounds the cache: at most 256×256 pixels of few
	// colours each, a few KB encoded, so a few MB in all.
	avatarCacheMax = 1024
)

type avatarCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

// avatars is shared by every API server in the process: its entries are
// a pure function of their keys, so nodes in one test process agree.
var avatars = &avatarCache{m: map[string][]byte{}}

func (a *avatarCache) get(seed string, size int) ([]byte, error) {
	key := strconv.Itoa(size) + " " + seed
	a.mu.Lock()
	b, ok := a.m[key]
	a.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := drawAvatar(seed, size)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) >= avatarCacheMax {
		// Dropping everything is crude but bounded, and refilling costs
		// one encoding per picture still asked for.
		clear(a.m)
	}
	a.m[key] = b
	return b, nil
}

// drawAvatar draws seed's picture at size×size pixels.
func drawAvatar(seed string, size int) ([]byte, error) {
	sum := sha256.Sum256([]byte(seed))
	// Colour: a hue from the hash at fixed saturation and lightness keeps
	// every picture readable on a white page.
	fg := hslColor(float64(uint16(sum[0])<<8|uint16(sum[1]))/65536, 0.55, 0.5)
	bg := color.RGBA{0xf0, 0xf0, 0xf0, 0xff}
	img := image.NewPaletted(image.Rect(0, 0, size, size), color.Palette{bg, fg})
	cell := size / avatarGrid
	margin := (size - cell*avatarGrid) / 2
	for row := range avatarGrid {
		for col := range (avatarGrid + 1) / 2 {
			bit := row*3 + col // 15 bits, from byte 2 on
			if sum[2+bit/8]>>(bit%8)&1 == 0 {
				continue
			}
			for _, c := range []int{col, avatarGrid - 1 - col} {
				for y := margin + row*cell; y < margin+(row+1)*cell; y++ {
					for x := margin + c*cell; x < margin+(c+1)*cell; x++ {
						img.SetColorIndex(x, y, 1)
					}
				}
			}
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// hslColor converts hue, saturation and lightness (each 0..1) to RGB.
func hslColor(h, s, l float64) color.RGBA {
	hue := func(p, q, t float64) float64 {
		switch {
		case t < 0:
			t++
		case t > 1:
			t--
		}
		switch {
		case t < 1.0/6:
			return p + (q-p)*6*t
		case t < 0.5:
			return q
		case t < 2.0/3:
			return p + (q-p)*(2.0/3-t)*6
		}
		return p
	}
	q := l + s - l*s
	if l < 0.5 {
		q = l * (1 + s)
	}
	p := 2*l - q
	to8 := func(v float64) uint8 { return uint8(v*255 + 0.5) }
	return color.RGBA{to8(hue(p, q, h+1.0/3)), to8(hue(p, q, h)), to8(hue(p, q, h-1.0/3)), 0xff}
}

// avatarSize reads ?s= (Bitbucket's size parameter); out of range is
// clamped, as browsers ask for whatever their layout needs.
func (c *call) avatarSize() (int, error) {
	v := c.query("s")
	if v == "" {
		return avatarDefaultSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, problem.New(problem.Invalid, "query parameter s must be an integer")
	}
	return min(max(n, avatarMinSize), avatarMaxSize), nil
}

func (c *call) sendAvatar(seed string) error {
	size, err := c.avatarSize()
	if err != nil {
		return err
	}
	body, err := avatars.get(seed, size)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	h := c.w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=3600")
	h.Set("X-Content-Type-Options", "nosniff")
	if inm := c.r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, etag) {
		c.w.WriteHeader(http.StatusNotModified)
		return nil
	}
	h.Set("Content-Type", "image/png")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(body) // a client gone away is not our error
	return nil
}

func (c *call) projectAvatar() error {
	proj, err := c.projectFor(auth.Read)
	if err != nil {
		return err
	}
	return c.sendAvatar("project:" + proj.Key)
}

func (c *call) userAvatar() error {
	if err := c.global(auth.Read); err != nil {
		return err
	}
	u, err := c.s.Store.UserByName(c.ctx, c.path("userSlug"))
	if err != nil {
		return err
	}
	return c.sendAvatar("user:" + entity.UserSlug(u.Name))
}
