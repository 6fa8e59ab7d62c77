package api

import (
	"regexp"
	"strconv"
	"strings"
)

// The OpenAPI 3 document is generated from the route table at request
// time, so every registered route appears in it with its method, summary
// and parameters, and nothing that is not registered does.

type openAPIParam struct {
	Name        string            `json:"name"`
	In          string            `json:"in"`
	Required    bool              `json:"required"`
	Description string            `json:"description,omitempty"`
	Schema      map[string]string `json:"schema"`
}

type openAPIOperation struct {
	Summary     string                    `json:"summary"`
	OperationID string                    `json:"operationId"`
	Parameters  []openAPIParam            `json:"parameters,omitempty"`
	RequestBody map[string]any            `json:"requestBody,omitempty"`
	Responses   map[string]map[string]any `json:"responses"`
	Security    []map[string][]string     `json:"security"`
}

var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)(\.\.\.)?\}`)

// openAPIPath turns a ServeMux pattern into an OpenAPI path template:
// {path...} becomes {path}.
func openAPIPath(pattern string) string {
	return wildcard.ReplaceAllString(pattern, "{$1}")
}

func operationID(method, pattern string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, seg := range strings.FieldsFunc(strings.TrimPrefix(pattern, "/rest/"), func(r rune) bool {
		return r == '/' || r == '-' || r == '.' || r == '{' || r == '}'
	}) {
		if seg == "" {
			continue
		}
		b.WriteString(strings.ToUpper(seg[:1]) + seg[1:])
	}
	return b.String()
}

func (s *server) openAPI() map[string]any {
	paths := map[string]map[string]openAPIOperation{}
	for _, rt := range s.routes {
		op := openAPIOperation{
			Summary:     rt.Summary,
			OperationID: operationID(rt.Method, rt.Pattern),
			Security:    []map[string][]string{{}, {"basic": {}}, {"bearer": {}}},
		}
		for _, m := range wildcard.FindAllStringSubmatch(rt.Pattern, -1) {
			op.Parameters = append(op.Parameters, openAPIParam{Name: m[1], In: "path", Required: true,
				Schema: map[string]string{"type": "string"}})
		}
		for _, p := range rt.Query {
			op.Parameters = append(op.Parameters, openAPIParam{Name: p.Name, In: "query", Required: p.Required,
				Description: p.Desc, Schema: map[string]string{"type": p.Type}})
		}
		if rt.Paged {
			op.Parameters = append(op.Parameters,
				openAPIParam{Name: "start", In: "query", Description: "index of the first result", Schema: map[string]string{"type": "integer"}},
				openAPIParam{Name: "limit", In: "query", Description: "page size (default 25, at most 1000)", Schema: map[string]string{"type": "integer"}})
		}
		if rt.Body != "" {
			op.RequestBody = map[string]any{
				"description": rt.Body,
				"required":    true,
				"content":     map[string]any{"application/json": map[string]any{"schema": map[string]string{"type": "object"}}},
			}
		}
		status := rt.Success
		if status == 0 {
			status = 200
		}
		ok := map[string]any{"description": "success"}
		if status != 204 && status != 202 {
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]string{"type": "object"}}}
		}
		op.Responses = map[string]map[string]any{
			strconv.Itoa(status): ok,
			"default": {"description": "error", "content": map[string]any{"application/json": map[string]any{
				"schema": map[string]string{"$ref": "#/components/schemas/Errors"}}}},
		}
		path := openAPIPath(rt.Pattern)
		if paths[path] == nil {
			paths[path] = map[string]openAPIOperation{}
		}
		paths[path][strings.ToLower(rt.Method)] = op
	}
	// Paths start with /rest/, so the server URL is the bare base.
	serverURL := s.BaseURL
	if serverURL == "" {
		serverURL = "/"
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":   "Sluice REST API",
			"version": "1.0",
			"description": "Bitbucket Data Center compatible REST API of Sluice. Every path under /rest/{family}/1.0/ " +
				"(or another numbered version) also answers under /rest/{family}/latest/, as in Bitbucket; " +
				"each is listed once, numbered. A trailing slash is accepted on every path.",
		},
		"servers": []map[string]string{{"url": serverURL}},
		"paths":   paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{
				"basic":  map[string]string{"type": "http", "scheme": "basic"},
				"bearer": map[string]string{"type": "http", "scheme": "bearer"},
			},
			"schemas": map[string]any{
				"Errors": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"errors": map[string]any{"type": "array", "items": map[string]any{
							"type": "object",
							"properties": map[string]any{
								"context":       map[string]any{"type": "string", "nullable": true},
								"message":       map[string]string{"type": "string"},
								"exceptionName": map[string]any{"type": "string", "nullable": true},
							},
						}},
					},
				},
			},
		},
	}
}

// openAPIDoc serves the document. It describes the API, not any data, so
// it is public like Bitbucket's own REST documentation.
func (c *call) openAPIDoc() error { return c.json(c.s.openAPI()) }
