// A `Result` alias is a `Result`: its error type needs `Display`.
#[derive(Debug)]
struct MyErr;

type Res<T> = Result<T, MyErr>;

#[haip::haip_tool]
async fn f(n: u32) -> Res<u32> {
    if n > 0 { Ok(n) } else { Err(MyErr) }
}

fn main() {}
