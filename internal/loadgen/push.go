package loadgen

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// PushOptions configure a push.
type PushOptions struct {
	// FileSize is the size of the generated blob; 0 means a short line.
	// The content is random so that every push adds new objects.
	FileSize int
}

// PushResult describes one push.
type PushResult struct {
	// Old and New are the branch tip before and after.
	Old, New string
	// PackBytes is the size of the pack sent.
	PackBytes int64
	// Bytes counts every response body byte.
	Bytes int64
	Total time.Duration
}

// PushRejectedError is a push the server refused in its status report.
type PushRejectedError struct {
	Ref    string
	Reason string
}

func (e *PushRejectedError) Error() string {
	return fmt.Sprintf("push %s rejected: %s", e.Ref, e.Reason)
}

// Push adds one generated commit on top of the current tip of branch
// (creating the branch if it does not exist). The commit's tree holds a
// single new file, so the pack is three objects whatever the repository's
// size; concurrent pushes to one branch race like real ones and the loser
// gets a PushRejectedError.
func (c *Client) Push(ctx context.Context, rawURL, branch string, opts PushOptions) (res PushResult, err error) {
	start := time.Now()
	defer func() { res.Total = time.Since(start) }()
	ep, err := c.endpoint(rawURL)
	if err != nil {
		return res, err
	}
	ref := "refs/heads/" + branch
	adv, err := c.advertisement(ctx, ep, "git-receive-pack", &res.Bytes)
	if err != nil {
		return res, err
	}
	body, err := c.pushRequest(adv, branch, opts, &res)
	if err != nil {
		return res, err
	}
	resp, err := c.do(ctx, ep, http.MethodPost, "/git-receive-pack", body, map[string]string{
		"Content-Type": "application/x-git-receive-pack-request",
		"Accept":       "application/x-git-receive-pack-result",
	}, "application/x-git-receive-pack-result", &res.Bytes)
	if err != nil {
		return res, err
	}
	defer resp.close()
	return res, readPushReport(resp.pkt, ref)
}

// pushRequest is the receive-pack request for one generated commit on
// branch: the command line and the pack. It fills res's Old, New and
// PackBytes.
func (c *Client) pushRequest(adv *advertisement, branch string, opts PushOptions, res *PushResult) ([]byte, error) {
	ref := "refs/heads/" + branch
	for _, need := range []string{"report-status", "side-band-64k"} {
		if _, ok := adv.caps[need]; !ok {
			return nil, fmt.Errorf("server lacks capability %q", need)
		}
	}
	if f, ok := adv.caps["object-format"]; ok && f != "sha1" {
		return nil, fmt.Errorf("unsupported object format %q", f)
	}
	res.Old = zeroOID
	for _, r := range adv.refs {
		if r.Name == ref {
			res.Old = r.OID
		}
	}
	objs, newOID, err := commitObjects(branch, res.Old, opts.FileSize)
	if err != nil {
		return nil, err
	}
	res.New = newOID
	pack, err := buildPack(objs)
	if err != nil {
		return nil, err
	}
	res.PackBytes = int64(len(pack))

	var b pktBuffer
	b.line("%s %s %s\x00report-status side-band-64k agent=%s", res.Old, res.New, ref, c.agent)
	b.flush()
	b.Write(pack)
	return b.Bytes(), nil
}

// readPushReport reads the side-banded status report for ref.
func readPushReport(pkt *pktReader, ref string) error {
	// With side-band-64k the status report is itself pkt-lines inside
	// band 1; collect it and parse it once the bands end.
	var report bytes.Buffer
	if err := demux(pkt, func(p []byte) error {
		if report.Len()+len(p) > 1<<20 {
			return errors.New("status report too large")
		}
		report.Write(p)
		return nil
	}); err != nil {
		return err
	}
	return parseReport(&report, ref)
}

// parseReport checks a report-status: "unpack ok" then "ok REF" or
// "ng REF REASON" for our one ref.
func parseReport(report *bytes.Buffer, ref string) error {
	pkt := newPktReader(report)
	defer pkt.release()
	kind, line, err := pkt.line()
	if err != nil {
		return fmt.Errorf("read status report: %w", err)
	}
	if kind != pktData || !strings.HasPrefix(line, "unpack ") {
		return fmt.Errorf("read status report: unexpected %q", line)
	}
	if line != "unpack ok" {
		return &PushRejectedError{Ref: ref, Reason: line}
	}
	seen := false
	for {
		kind, line, err := pkt.line()
		if err != nil {
			return fmt.Errorf("read status report: %w", err)
		}
		if kind == pktFlush {
			break
		}
		status, rest, _ := strings.Cut(line, " ")
		name, reason, _ := strings.Cut(rest, " ")
		if name != ref {
			return fmt.Errorf("read status report: unexpected ref %q", name)
		}
		switch status {
		case "ok":
			seen = true
		case "ng":
			return &PushRejectedError{Ref: ref, Reason: reason}
		default:
			return fmt.Errorf("read status report: bad line %q", line)
		}
	}
	if !seen {
		return fmt.Errorf("read status report: no status for %s", ref)
	}
	return nil
}

// commitObjects generates a blob of random content, a tree holding it and
// a commit on parent; it returns the objects in pack order and the commit id.
func commitObjects(branch, parent string, size int) ([]packObject, string, error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, "", fmt.Errorf("generate content: %w", err)
	}
	content := []byte(fmt.Sprintf("loadgen push to %s %x\n", branch, nonce))
	// Pad to size; the first line, which makes the blob unique, stays.
	first := len(content)
	for len(content) < size {
		content = append(content, hex.EncodeToString(nonce[:])...)
		content = append(content, '\n')
	}
	content = content[:max(size, first)]
	blob := packObject{typ: objBlob, data: content}
	blobID := blob.oid()
	tree := packObject{typ: objTree, data: append([]byte("100644 loadgen.txt\x00"), blobID[:]...)}
	treeID := tree.oid()
	now := time.Now().Unix()
	var cm strings.Builder
	fmt.Fprintf(&cm, "tree %x\n", treeID)
	if parent != zeroOID {
		fmt.Fprintf(&cm, "parent %s\n", parent)
	}
	fmt.Fprintf(&cm, "author Sluice Loadgen <loadgen@sluice.invalid> %d +0000\n", now)
	fmt.Fprintf(&cm, "committer Sluice Loadgen <loadgen@sluice.invalid> %d +0000\n", now)
	fmt.Fprintf(&cm, "\nloadgen push %x\n", nonce[:4])
	commit := packObject{typ: objCommit, data: []byte(cm.String())}
	commitID := commit.oid()
	return []packObject{commit, tree, blob}, hex.EncodeToString(commitID[:]), nil
}
