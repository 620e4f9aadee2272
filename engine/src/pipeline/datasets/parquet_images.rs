//! Parquet files of image bytes, as img2dataset and Hugging Face `datasets` write them: the
//! image in a struct column with `bytes` and `path` fields (`datasets`' Image feature), or in a
//! plain binary column (img2dataset's `jpg`). The column is `--image-column`, else the first
//! such column; a `key` column, when there is one, names each row, else `<file stem>/<row>`.
//!
//! The file is read one row group at a time and only the columns needed: the scan reads the
//! footer and the key column, the workers the image column of the row group they need (the
//! first worker to need a row group decodes it, the others wait for it, and it is dropped once
//! every row of it has been taken; the first worker to take a row of a group reads the next
//! group ahead, so that the workers do not all wait at each boundary), so memory holds a few
//! row groups' images, never the file.

use super::{ImageAt, Sample};
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::column::reader::get_typed_column_reader;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::ColumnDescriptor;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// Where a file's images are: the leaf column of their bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageColumn {
    /// Its index among the file's leaf columns.
    pub leaf: usize,
    /// Its definition level when a value is there (lower: null).
    pub max_def_level: i16,
}

/// What the scan of one file found.
#[derive(Debug)]
pub struct ParquetScan {
    pub samples: Vec<Sample>,
    pub column: ImageColumn,
    /// Rows per row group, in order.
    pub row_groups: Vec<usize>,
}

fn is_text(column: &ColumnDescriptor) -> bool {
    matches!(column.logical_type_ref(), Some(LogicalType::String))
        || column.converted_type() == ConvertedType::UTF8
}

/// The leaf column that holds the images: `asked` (a top-level column: a struct with a binary
/// `bytes` field, or a binary column) or else the first top-level column that is one.
fn image_column(
    reader: &SerializedFileReader<File>,
    asked: Option<&str>,
) -> Result<ImageColumn, String> {
    let schema = reader.metadata().file_metadata().schema_descr();
    let holds_images = |column: &ColumnDescriptor| {
        let parts = column.path().parts();
        column.physical_type() == PhysicalType::BYTE_ARRAY
            && column.max_rep_level() == 0
            && match parts {
                [_] => !is_text(column),
                [_, field] => field == "bytes",
                _ => false,
            }
    };
    let found = schema.columns().iter().enumerate().find(|(_, column)| {
        holds_images(column) && asked.is_none_or(|name| column.path().parts()[0] == name)
    });
    match found {
        Some((leaf, column)) => Ok(ImageColumn {
            leaf,
            max_def_level: column.max_def_level(),
        }),
        None => {
            let names: Vec<String> = schema
                .root_schema()
                .get_fields()
                .iter()
                .map(|f| f.name().to_string())
                .collect();
            Err(match asked {
                Some(name) => format!(
                    "--image-column {name}: no such column of image bytes (a binary column, or \
                     a struct with a binary `bytes` field); the columns are {}",
                    names.join(", ")
                ),
                None => format!(
                    "no column of image bytes (a binary column, or a struct with a binary \
                     `bytes` field); the columns are {}; name one with --image-column",
                    names.join(", ")
                ),
            })
        }
    }
}

fn open(path: &Path) -> Result<SerializedFileReader<File>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    SerializedFileReader::new(file)
        .map_err(|e| format!("{}: not a Parquet file: {e}", path.display()))
}

/// Scans the Parquet file at `path` (shard number `shard` of the run): its row groups, the
/// image column, and each row's key.
pub fn scan(path: &Path, shard: usize, asked: Option<&str>) -> Result<ParquetScan, String> {
    let reader = open(path)?;
    let column = image_column(&reader, asked).map_err(|e| format!("{}: {e}", path.display()))?;
    let metadata = reader.metadata();
    let schema = metadata.file_metadata().schema_descr();
    let key_leaf = schema
        .columns()
        .iter()
        .position(|c| c.path().parts() == ["key"] && c.max_rep_level() == 0);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut samples = Vec::new();
    let mut row_groups = Vec::new();
    let mut row_in_file = 0usize;
    for group in 0..reader.num_row_groups() {
        let rows = metadata.row_group(group).num_rows().max(0) as usize;
        row_groups.push(rows);
        let keys = match key_leaf {
            Some(leaf) => read_keys(&reader, group, leaf, rows).map_err(|e| {
                format!("{}: row group {group}: the key column: {e}", path.display())
            })?,
            None => vec![None; rows],
        };
        for (row, key) in keys.into_iter().enumerate() {
            samples.push(Sample {
                shard,
                key: key.unwrap_or_else(|| format!("{stem}/{}", row_in_file + row)),
                image: ImageAt::Parquet { group, row },
                sidecars: Vec::new(),
            });
        }
        row_in_file += rows;
    }
    Ok(ParquetScan {
        samples,
        column,
        row_groups,
    })
}

/// The `key` column of one row group as text (strings as they are, integers in decimal); null
/// keys are `None`.
fn read_keys(
    reader: &SerializedFileReader<File>,
    group: usize,
    leaf: usize,
    rows: usize,
) -> Result<Vec<Option<String>>, String> {
    let descriptor = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .column(leaf);
    let max_def = descriptor.max_def_level();
    let row_group = reader.get_row_group(group).map_err(|e| e.to_string())?;
    let column = row_group
        .get_column_reader(leaf)
        .map_err(|e| e.to_string())?;
    let mut defs = Vec::new();
    let texts: Vec<String> = match descriptor.physical_type() {
        PhysicalType::BYTE_ARRAY => {
            let mut values: Vec<ByteArray> = Vec::new();
            read_all(
                &mut get_typed_column_reader::<ByteArrayType>(column),
                rows,
                &mut defs,
                &mut values,
            )?;
            values
                .iter()
                .map(|v| String::from_utf8_lossy(v.data()).into_owned())
                .collect()
        }
        PhysicalType::INT64 => {
            let mut values: Vec<i64> = Vec::new();
            read_all(
                &mut get_typed_column_reader::<Int64Type>(column),
                rows,
                &mut defs,
                &mut values,
            )?;
            values.iter().map(i64::to_string).collect()
        }
        PhysicalType::INT32 => {
            let mut values: Vec<i32> = Vec::new();
            read_all(
                &mut get_typed_column_reader::<Int32Type>(column),
                rows,
                &mut defs,
                &mut values,
            )?;
            values.iter().map(i32::to_string).collect()
        }
        _ => return Ok(vec![None; rows]),
    };
    Ok(with_nulls(texts, &defs, max_def, rows))
}

/// Reads `rows` records of a flat column into `values` (the non-null ones) and `defs`.
fn read_all<T: parquet::data_type::DataType>(
    reader: &mut parquet::column::reader::ColumnReaderImpl<T>,
    rows: usize,
    defs: &mut Vec<i16>,
    values: &mut Vec<T::T>,
) -> Result<(), String> {
    let mut read = 0;
    while read < rows {
        let (records, _, _) = reader
            .read_records(rows - read, Some(&mut *defs), None, &mut *values)
            .map_err(|e| e.to_string())?;
        if records == 0 {
            return Err(format!("the column ends after {read} of its {rows} rows"));
        }
        read += records;
    }
    Ok(())
}

/// Spreads the non-null `values` over `rows` rows by their definition levels.
fn with_nulls<V>(values: Vec<V>, defs: &[i16], max_def: i16, rows: usize) -> Vec<Option<V>> {
    if max_def == 0 {
        return values.into_iter().map(Some).collect();
    }
    let mut values = values.into_iter();
    (0..rows)
        .map(|row| {
            defs.get(row)
                .filter(|&&d| d == max_def)
                .and_then(|_| values.next())
        })
        .collect()
}

/// The image bytes of one row group, by row (`None`: null).
type GroupImages = Result<Vec<Option<ByteArray>>, String>;

fn read_group(path: &Path, column: &ImageColumn, group: usize, rows: usize) -> GroupImages {
    let reader = open(path)?;
    let row_group = reader
        .get_row_group(group)
        .map_err(|e| format!("{}: row group {group}: {e}", path.display()))?;
    let reader_of = row_group
        .get_column_reader(column.leaf)
        .map_err(|e| format!("{}: row group {group}: {e}", path.display()))?;
    let mut defs = Vec::new();
    let mut values: Vec<ByteArray> = Vec::new();
    read_all(
        &mut get_typed_column_reader::<ByteArrayType>(reader_of),
        rows,
        &mut defs,
        &mut values,
    )
    .map_err(|e| format!("{}: row group {group}: {e}", path.display()))?;
    Ok(with_nulls(values, &defs, column.max_def_level, rows))
}

/// One row group being read by the workers.
struct Group {
    images: OnceLock<GroupImages>,
    /// Whether a worker took a row of it yet (the first one reads the next group ahead).
    started: std::sync::atomic::AtomicBool,
    /// Rows not yet taken: the group is dropped when none are left.
    untaken: Mutex<usize>,
}

/// The row groups the workers are reading, shared by them: each is read once, by the first
/// worker to need it, and dropped when its last row is taken. A row read again (a batch
/// decoded again on the host) comes from the group if it is still held, else from the one
/// group kept for such reads, so memory stays bounded.
#[derive(Default)]
pub struct RowGroupCache {
    groups: Mutex<HashMap<(usize, usize), Arc<Group>>>,
    /// The group last read for rows read again.
    again: Mutex<Option<KeptGroup>>,
}

/// A row group's images by (shard, group).
type KeptGroup = ((usize, usize), Arc<GroupImages>);

/// Copies `row` of a row group's images into `out`.
fn copy_row(
    images: &GroupImages,
    group: usize,
    row: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    match images {
        Ok(images) => match images.get(row) {
            Some(Some(bytes)) => {
                out.clear();
                out.extend_from_slice(bytes.data());
                Ok(())
            }
            Some(None) => Err("the image is null".to_string()),
            None => Err(format!("row group {group} has no row {row}")),
        },
        Err(why) => Err(why.clone()),
    }
}

impl RowGroupCache {
    /// Copies the image bytes of `row` of `group` of shard `shard` (the file at `path`,
    /// `rows` rows in that group, `next_rows` in the next if there is one) into `out`; an
    /// error for a null image or an unreadable row group. `again`: the row was taken before,
    /// so it does not count towards dropping the group.
    pub fn read(
        &self,
        (shard, path): (usize, &Path),
        column: &ImageColumn,
        (group, row, rows, next_rows): (usize, usize, usize, Option<usize>),
        again: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let key = (shard, group);
        if again {
            let held = self
                .groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .cloned();
            if let Some(entry) = held {
                let images = entry
                    .images
                    .get_or_init(|| read_group(path, column, group, rows));
                return copy_row(images, group, row, out);
            }
            let mut kept = self.again.lock().unwrap_or_else(|p| p.into_inner());
            let images = match &*kept {
                Some((at, images)) if *at == key => Arc::clone(images),
                _ => {
                    let images = Arc::new(read_group(path, column, group, rows));
                    *kept = Some((key, Arc::clone(&images)));
                    images
                }
            };
            return copy_row(&images, group, row, out);
        }
        let entry = self.entry(key, rows);
        let first = !entry
            .started
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        let images = entry
            .images
            .get_or_init(|| read_group(path, column, group, rows));
        let result = copy_row(images, group, row, out);
        {
            let mut untaken = entry.untaken.lock().unwrap_or_else(|p| p.into_inner());
            *untaken = untaken.saturating_sub(1);
            if *untaken == 0 {
                self.groups
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
            }
        }
        // The first worker to take a row of this group reads the next one now, while the
        // others decode this one's images: the workers do not all wait at the boundary.
        if let (true, Some(next_rows)) = (first, next_rows) {
            let next = self.entry((shard, group + 1), next_rows);
            next.images
                .get_or_init(|| read_group(path, column, group + 1, next_rows));
        }
        result
    }

    /// The entry of `key` (a group of `rows` rows), made if need be.
    fn entry(&self, key: (usize, usize), rows: usize) -> Arc<Group> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(groups.entry(key).or_insert_with(|| {
            Arc::new(Group {
                images: OnceLock::new(),
                started: Default::default(),
                untaken: Mutex::new(rows),
            })
        }))
    }
}
