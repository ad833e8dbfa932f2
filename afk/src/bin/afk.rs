//! The `afk` command-line tool.

fn main() {
    println!("afk: work in progress");
}
