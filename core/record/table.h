// The console reporter: the tables `memfine run`, `train`, `predict` and `table` print. It only
// reads records. A table is a grid of cells with notes under it, rendered as aligned text or as
// Markdown; CSV is the records themselves, one row each with flat columns.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace memfine {

using json = nlohmann::json;

struct Grid {
  std::string title;  // a line above the table ("" none)
  std::vector<std::string> header;
  std::vector<std::string> units;  // a second header line, each column's unit ("" none); empty: none
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;  // lines under it
  size_t left = 2;                 // the first `left` columns are text (left-aligned)
  bool last_left = false;          // so is the last (a free-text column)
};
std::string text(const Grid& g);
// Columns a cell takes on a terminal: its UTF-8 characters (a "±" is two bytes, one column).
size_t columns(const std::string& s);

// A table's width without --wide.
constexpr size_t kNarrowColumns = 120;
// Cells of the text columns `cuts` ({column, least width}, in that order) cut with "..." just
// enough that the rows fit `width` columns, none below its least width.
void fit_width(Grid& g, size_t width, const std::vector<std::pair<size_t, size_t>>& cuts);
std::string markdown(const Grid& g);

// `memfine run`'s: one row per point and strategy (and rank): status, s', chunks, dropped share,
// static and activation bytes, median step time and ratios against the strategy of role
// "baseline" (where it ran out of memory, against it at the nearest budget of the same point where
// it fit, marked), the verify verdict where checked; the first `earlier` records (from before a
// --resume) are marked with the machine and commit they came from. Not `wide`: within about 120
// columns (labels cut, static bytes left out, chunks and dropped only where a record has them); a
// step time whose timed steps spread widely is marked.
Grid run_grid(const std::vector<json>& records, size_t earlier = 0, bool wide = false);
inline std::string summary_table(const std::vector<json>& records, size_t earlier = 0) {
  return text(run_grid(records, earlier));
}

// `memfine train`'s: per point and strategy, the steps recorded, the step it ran out of memory
// at, the last held-out loss, the largest activation peak, the median step time and tokens per
// second (the whole job's on real ranks), the verify verdict.
Grid train_grid(const std::vector<json>& records);
inline std::string train_table(const std::vector<json>& records) { return text(train_grid(records)); }

// `memfine predict`'s: per point and strategy, the predicted static, activation and total bytes,
// whether they fit the budget, MACT's chunks per layer, and why a strategy is not predicted or
// does not fit.
Grid predict_grid(const std::vector<json>& records);
inline std::string predict_table(const std::vector<json>& records) { return text(predict_grid(records)); }

// Records as CSV: one row per record, its fields flattened to columns (config.model.hidden,
// step_ms.median; lists as JSON text), the union of every record's, the head's first.
std::string records_csv(const std::vector<json>& records);

}  // namespace memfine
