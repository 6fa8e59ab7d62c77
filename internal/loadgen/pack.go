package loadgen

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
)

// packVerifier checks a pack as it streams past without keeping it: the
// 12-byte header ("PACK", version 2 or 3, object count) is parsed from the
// first bytes, everything but the last 20 bytes goes through SHA-1, and the
// last 20 bytes, held back in tail because the end of the stream is only
// known once it has ended, must equal that hash.
//
// For a fingerprint (see VerifyFingerprint) the same bytes also, or
// instead of SHA-1, go through CRC-32C, which the CPU computes about
// twenty times faster.
type packVerifier struct {
	// h is nil when the pack is checked against a fingerprint alone.
	h hash.Hash
	// crc is the CRC-32C of the bytes before the trailer, if withCRC.
	crc     uint32
	withCRC bool
	header  [12]byte
	nhdr    int
	tail    [2 * sha1.Size]byte
	ntail   int
	n       int64
	objects uint32
	version uint32
}

func newPackVerifier() *packVerifier {
	return &packVerifier{h: sha1.New()}
}

// castagnoli is the CRC-32C table; hash/crc32 uses the SSE4.2 (amd64) or
// CRC (arm64) instructions for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// body consumes pack bytes that are known not to be the trailer.
func (v *packVerifier) body(p []byte) {
	if len(p) == 0 {
		return
	}
	if v.h != nil {
		v.h.Write(p)
	}
	if v.withCRC {
		v.crc = crc32.Update(v.crc, castagnoli, p)
	}
}

// Write consumes the next chunk of pack data; it fails as soon as the
// header is known to be wrong.
func (v *packVerifier) Write(p []byte) (int, error) {
	size := len(p)
	v.n += int64(size)
	if v.nhdr < len(v.header) {
		c := copy(v.header[v.nhdr:], p)
		v.nhdr += c
		if v.nhdr == len(v.header) {
			if err := v.parseHeader(); err != nil {
				return 0, err
			}
		}
	}
	// Keep the newest sha1.Size bytes out of the hash: they may be the
	// trailer. tail holds at most sha1.Size bytes between calls.
	if len(p) >= sha1.Size {
		v.body(v.tail[:v.ntail])
		v.body(p[:len(p)-sha1.Size])
		v.ntail = copy(v.tail[:], p[len(p)-sha1.Size:])
	} else {
		v.ntail += copy(v.tail[v.ntail:], p)
		if v.ntail > sha1.Size {
			out := v.ntail - sha1.Size
			v.body(v.tail[:out])
			copy(v.tail[:], v.tail[out:v.ntail])
			v.ntail = sha1.Size
		}
	}
	return size, nil
}

func (v *packVerifier) parseHeader() error {
	if !bytes.Equal(v.header[:4], []byte("PACK")) {
		return fmt.Errorf("not a pack: header %q", v.header[:4])
	}
	v.version = binary.BigEndian.Uint32(v.header[4:8])
	if v.version != 2 && v.version != 3 {
		return fmt.Errorf("unsupported pack version %d", v.version)
	}
	v.objects = binary.BigEndian.Uint32(v.header[8:12])
	return nil
}

// finish checks the header and the length once the stream has ended, and
// the trailer against the SHA-1 if one was computed.
func (v *packVerifier) finish() error {
	if v.nhdr < len(v.header) {
		if v.n == 0 {
			return errors.New("no pack data")
		}
		return fmt.Errorf("truncated pack header: %d bytes", v.n)
	}
	if v.n < int64(len(v.header)+sha1.Size) || v.ntail != sha1.Size {
		return fmt.Errorf("truncated pack: %d bytes", v.n)
	}
	if v.h == nil {
		return nil
	}
	sum := v.h.Sum(nil)
	if !bytes.Equal(sum, v.tail[:sha1.Size]) {
		return fmt.Errorf("pack checksum mismatch: trailer %s, computed %s",
			hex.EncodeToString(v.tail[:sha1.Size]), hex.EncodeToString(sum))
	}
	return nil
}

// Object types as the pack format numbers them.
const (
	objCommit = 1
	objTree   = 2
	objBlob   = 3
)

var objTypeName = map[int]string{objCommit: "commit", objTree: "tree", objBlob: "blob"}

// packObject is one whole (undeltified) object for buildPack.
type packObject struct {
	typ  int
	data []byte
}

// oid is the object id git gives data of type typ.
func (o packObject) oid() [sha1.Size]byte {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", objTypeName[o.typ], len(o.data))
	h.Write(o.data)
	var id [sha1.Size]byte
	h.Sum(id[:0])
	return id
}

// buildPack writes a version 2 pack holding objs, each zlib-compressed
// behind its type-and-size header, with the SHA-1 trailer.
func buildPack(objs []packObject) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("PACK")
	binary.Write(&buf, binary.BigEndian, uint32(2))
	binary.Write(&buf, binary.BigEndian, uint32(len(objs)))
	for _, o := range objs {
		// Header: the first byte holds a continuation bit, 3 type bits and
		// the low 4 size bits; further bytes carry 7 size bits each.
		size := uint64(len(o.data))
		c := byte(o.typ<<4) | byte(size&0x0f)
		size >>= 4
		for size > 0 {
			buf.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		buf.WriteByte(c)
		zw := zlib.NewWriter(&buf)
		if _, err := zw.Write(o.data); err != nil {
			return nil, fmt.Errorf("compress object: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("compress object: %w", err)
		}
	}
	sum := sha1.Sum(buf.Bytes())
	buf.Write(sum[:])
	return buf.Bytes(), nil
}
