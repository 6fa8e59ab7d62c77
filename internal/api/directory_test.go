package api_test

import (
	"testing"
)

func TestUserAndGroupDirectory(t *testing.T) {
	e := newEnv(t)
	for _, g := range []string{"devs", "ops", "dev-leads"} {
		e.must(200, "POST", "/rest/api/1.0/admin/groups?name="+g, e.admin, nil)
	}

	// Detailed users: administrators only, paged and filtered.
	e.must(403, "GET", "/rest/api/1.0/admin/users", e.alice, nil)
	e.must(401, "GET", "/rest/api/1.0/admin/users", "", nil)
	var users struct {
		Size          int  `json:"size"`
		IsLastPage    bool `json:"isLastPage"`
		NextPageStart int  `json:"nextPageStart"`
		Values        []struct {
			userJSON
			DirectoryName    string `json:"directoryName"`
			Deletable        bool   `json:"deletable"`
			MutableDetails   bool   `json:"mutableDetails"`
			CreatedTimestamp int64  `json:"createdTimestamp"`
		} `json:"values"`
	}
	e.must(200, "GET", "/rest/api/1.0/admin/users?filter=ali", e.admin, nil).json(t, &users)
	if users.Size != 1 || users.Values[0].Name != "alice" || users.Values[0].EmailAddress != "alice@example.com" ||
		!users.Values[0].Deletable || !users.Values[0].MutableDetails || users.Values[0].DirectoryName == "" ||
		users.Values[0].CreatedTimestamp == 0 {
		t.Fatalf("filtered users %+v", users)
	}
	e.must(200, "GET", "/rest/api/1.0/admin/users?limit=2", e.admin, nil).json(t, &users)
	if users.Size != 2 || users.IsLastPage || users.NextPageStart != 2 {
		t.Fatalf("first page %+v", users)
	}
	e.must(200, "GET", "/rest/api/latest/admin/users?start=4&limit=2", e.admin, nil).json(t, &users)
	if users.Size != 1 || !users.IsLastPage {
		t.Fatalf("last page %+v", users)
	}

	// Group names: any signed-in user, paged and filtered.
	e.must(401, "GET", "/rest/api/1.0/groups", "", nil)
	var groups struct {
		Size       int      `json:"size"`
		IsLastPage bool     `json:"isLastPage"`
		Values     []string `json:"values"`
	}
	e.must(200, "GET", "/rest/api/1.0/groups?filter=dev", e.alice, nil).json(t, &groups)
	if groups.Size != 2 || groups.Values[0] != "dev-leads" || groups.Values[1] != "devs" {
		t.Fatalf("groups %+v", groups)
	}
	e.must(200, "GET", "/rest/api/1.0/groups?limit=1", e.bob, nil).json(t, &groups)
	if groups.Size != 1 || groups.IsLastPage {
		t.Fatalf("group page %+v", groups)
	}
	e.must(400, "GET", "/rest/api/1.0/groups?limit=x", e.bob, nil)
}
