package web

// markTooLarge sets SizeLimit on the binary files of the diff from..to
// (from empty: to's first parent) in repository id whose old or new side
// is over git.max_diff_blob_size. Only binary files are asked about: git
// shows every file over the limit as binary, so an all-text diff costs
// no extra git process.
func (c *call) markTooLarge(id int64, from, to string, files []diffFile) error {
	var paths []string
	for _, f := range files {
		if f.Binary {
			for _, p := range []string{f.OldPath, f.NewPath} {
				if p != "" {
					paths = append(paths, p)
				}
			}
		}
	}
	if len(paths) == 0 {
		return nil
	}
	big, err := c.s.Repos.DiffTooLarge(c.ctx, id, from, to, paths)
	if err != nil || len(big) == 0 {
		return err
	}
	limit := c.s.Repos.MaxDiffBlobSize()
	for i := range files {
		f := &files[i]
		if f.Binary && (big[f.OldPath] > 0 || big[f.NewPath] > 0) {
			f.SizeLimit = limit
		}
	}
	return nil
}
