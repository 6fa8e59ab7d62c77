package sshd

import (
	"strings"
	"testing"

	"github.com/sluice-scm/sluice/internal/hosting"
)

func TestParseCommand(t *testing.T) {
	ok := []struct {
		in                 string
		service, key, slug string
	}{
		{"git-upload-pack '/PROJ/repo.git'", hosting.UploadPack, "PROJ", "repo"},
		{"git-upload-pack 'PROJ/repo.git'", hosting.UploadPack, "PROJ", "repo"},
		{"git-upload-pack '/proj/repo'", hosting.UploadPack, "proj", "repo"},
		{"git-receive-pack '/PROJ/my-repo_2.x.git'", hosting.ReceivePack, "PROJ", "my-repo_2.x"},
		{"git-upload-archive '/P_1/Repo.git'", hosting.UploadArchive, "P_1", "repo"},
		{"git-upload-pack '/~alice/repo.git'", hosting.UploadPack, "~alice", "repo"},
		{"git-receive-pack '~Alice.Smith/repo.git'", hosting.ReceivePack, "~Alice.Smith", "repo"},
	}
	for _, tc := range ok {
		c, err := parseCommand(tc.in)
		if err != nil {
			t.Errorf("parseCommand(%q): %v", tc.in, err)
			continue
		}
		if c.Service != tc.service || c.ProjectKey != tc.key || c.Slug != tc.slug {
			t.Errorf("parseCommand(%q) = %+v", tc.in, c)
		}
	}

	bad := []string{
		"",
		"git-upload-pack",
		"git-upload-pack ",
		"git-upload-pack ''",
		"git-upload-pack '/PROJ/repo.git",
		"git-upload-pack /PROJ/repo.git'",
		"git-upload-pack /PROJ/repo.git",
		"git-upload-pack \"/PROJ/repo.git\"",
		"git-upload-pack  '/PROJ/repo.git'",
		"git-upload-pack '/PROJ/repo.git' ",
		"git-upload-pack '/PROJ/repo.git' '/PROJ/repo.git'",
		"git-upload-pack '--upload-pack=touch /tmp/x'",
		"git-upload-pack '--help'",
		"git-upload-pack --help",
		"git-upload-pack '-/repo.git'",
		"git-upload-pack '/PROJ/-repo.git'",
		"git-upload-pack '/PROJ/repo.git';id",
		"git-upload-pack '/PROJ/repo.git;id'",
		"git-upload-pack '$(id)'",
		"git-upload-pack '/PROJ/$(id).git'",
		"git-upload-pack '`id`'",
		"git-upload-pack '/PROJ/repo.git'\nid",
		"git-upload-pack '/PROJ/repo\n.git'",
		"git-upload-pack '/PROJ/repo\x00.git'",
		"git-upload-pack '/PROJ/repo.git\r'",
		`git-upload-pack '/PROJ/re'\''po.git'`,
		"git-upload-pack '/PROJ/../OTHER/repo.git'",
		"git-upload-pack '/PROJ/..'",
		"git-upload-pack '/~/repo.git'",
		"git-upload-pack '/a~b/repo.git'",
		"git-upload-pack '/~~a/repo.git'",
		"git-upload-pack '/~a/~repo.git'",
		"git-upload-pack '~/repo.git'",
		"git-upload-pack '/~-a/repo.git'",
		"git-upload-pack '/~../repo.git'",
		"git-upload-pack '../PROJ/repo.git'",
		"git-upload-pack '/PROJ/a/b.git'",
		"git-upload-pack '/PROJ.git'",
		"git-upload-pack '/PROJ/'",
		"git-upload-pack '//repo.git'",
		"git-upload-pack '~/repo.git'",
		"git-upload-pack '/PROJ/repo.git/'",
		"git-upload-pack '/PROJ/.git'",
		"git-upload-pack '/1PROJ/repo.git'",
		"git-upload-pack '/PROJ/r%2e.git'",
		"git upload-pack '/PROJ/repo.git'",
		"git-upload-pack\t'/PROJ/repo.git'",
		"git-http-backend '/PROJ/repo.git'",
		"GIT-UPLOAD-PACK '/PROJ/repo.git'",
		"sh -c 'id'",
		"git-upload-pack '/PROJ/" + strings.Repeat("a", maxCommandLen) + "'",
		"git-upload-pack '/PROJ/répo.git'",
	}
	for _, in := range bad {
		if c, err := parseCommand(in); err == nil {
			t.Errorf("parseCommand(%q) = %+v, want an error", in, c)
		}
	}
}

func FuzzParseCommand(f *testing.F) {
	f.Add("git-upload-pack '/PROJ/repo.git'")
	f.Add("git-receive-pack 'PROJ/repo'")
	f.Add("git-upload-pack '--upload-pack=touch /tmp/x'")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := parseCommand(in)
		if err != nil {
			return
		}
		// Whatever parses is a known service and names that only hold
		// safe characters, none beginning with '-'.
		for _, s := range []string{c.ProjectKey, c.Slug} {
			if s == "" || s[0] == '-' || strings.Contains(s, "..") ||
				strings.ContainsFunc(s, func(r rune) bool {
					return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
				}) {
				t.Fatalf("parseCommand(%q) accepted unsafe name %q", in, s)
			}
		}
		switch c.Service {
		case hosting.UploadPack, hosting.ReceivePack, hosting.UploadArchive:
		default:
			t.Fatalf("parseCommand(%q) accepted service %q", in, c.Service)
		}
	})
}
