//! The installation's id, made once by whichever process first asks for it and
//! the same for every replica sharing the database.

use super::Store;
use super::error::StoreResult;

impl Store {
    pub async fn installation(&self) -> StoreResult<String> {
        sqlx::query(
            "INSERT INTO installation (id) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM installation)",
        )
        .bind(crate::ids::new_id("i"))
        .execute(self.writer())
        .await?;
        let id: String = sqlx::query_scalar("SELECT MIN(id) FROM installation")
            .fetch_one(self.writer())
            .await?;
        Ok(id)
    }
}
